// Tests of Gated DeltaNet (docs/model.md §7): the gates by hand, the recurrence against the closed
// form S_t = e^{g}(I − β k̂k̂ᵀ)S + β k̂vᵀ built with explicit matrices, and the chunked (WY)
// form against the recurrence for many lengths, chunk sizes and carried states.
#include "kernels/gdn/gdn.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::Normal;
using op_test::AllClose;
using op_test::NoNan;

// One problem: inputs for T tokens, as the conv and gates would produce them.
struct Problem {
  GdnDims d;
  int64_t T;
  std::vector<float> q, k, v, beta, g;
};

Problem MakeProblem(const GdnDims& d, int64_t T, uint32_t seed, float g_lo = -0.3f, float g_hi = 0.0f) {
  Problem p{d, T, {}, {}, {}, {}, {}};
  p.q = Normal(T * d.key_heads * d.key_dim, seed);
  p.k = Normal(T * d.key_heads * d.key_dim, seed + 1);
  p.v = Normal(T * d.value_heads * d.value_dim, seed + 2);
  p.beta = Uniform(T * d.value_heads, seed + 3, 0.05f, 1.0f);
  p.g = Uniform(T * d.value_heads, seed + 4, g_lo, g_hi);
  return p;
}

// The closed form in double with explicit matrices, per value head j reading key head
// ⌊j / (Hv/Hk)⌋. state [Hv, dk, dv] is updated; returns o [T, Hv, dv].
std::vector<double> ClosedForm(const Problem& p, std::vector<double>& state) {
  const GdnDims& d = p.d;
  const int64_t dk = d.key_dim, dv = d.value_dim, group = d.value_heads / d.key_heads;
  std::vector<double> o(p.T * d.value_heads * dv);
  auto l2 = [&](const float* x, double scale) {
    double ss = 0;
    for (int64_t i = 0; i < dk; ++i) ss += static_cast<double>(x[i]) * x[i];
    std::vector<double> out(dk);
    for (int64_t i = 0; i < dk; ++i) out[i] = x[i] / std::sqrt(ss + 1e-6) * scale;
    return out;
  };
  std::vector<double> A(dk * dk), next(dk * dv);
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t j = 0; j < d.value_heads; ++j) {
      const int64_t kh = j / group;
      const std::vector<double> qn = l2(&p.q[(t * d.key_heads + kh) * dk], 1.0 / std::sqrt(static_cast<double>(dk)));
      const std::vector<double> kn = l2(&p.k[(t * d.key_heads + kh) * dk], 1.0);
      const float* vt = &p.v[(t * d.value_heads + j) * dv];
      const double beta = p.beta[t * d.value_heads + j], decay = std::exp(static_cast<double>(p.g[t * d.value_heads + j]));
      double* S = &state[j * dk * dv];
      // A = e^g (I − β k̂ k̂ᵀ)
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dk; ++c) A[r * dk + c] = decay * ((r == c ? 1.0 : 0.0) - beta * kn[r] * kn[c]);
      // S' = A·S + β k̂ vᵀ
      for (int64_t r = 0; r < dk; ++r) {
        for (int64_t c = 0; c < dv; ++c) {
          double acc = beta * kn[r] * vt[c];
          for (int64_t m = 0; m < dk; ++m) acc += A[r * dk + m] * S[m * dv + c];
          next[r * dv + c] = acc;
        }
      }
      std::copy(next.begin(), next.end(), S);
      // o = S'ᵀ q̂
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (int64_t r = 0; r < dk; ++r) acc += S[r * dv + c] * qn[r];
        o[(t * d.value_heads + j) * dv + c] = acc;
      }
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Gates

TEST(GdnGates, HandComputed) {
  // Hv = 4 heads, one token.
  //   head 0: b = 0        → β = 0.5;   a + dt_bias = 0,  A_log = 0   → g = −softplus(0) = −ln 2 = −0.6931472
  //   head 1: b = ln 3     → β = 0.75;  a + dt_bias = 25 (> 20: linear), A_log = ln 2 → g = −2·25 = −50
  //   head 2: b = −ln 3    → β = 0.25;  a + dt_bias = 19 + 2 = 21 (> 20), A_log = 0 → g = −21
  //   head 3: b = 10       → β = 0.9999546; a + dt_bias = −30, A_log = 0 → g = −log1p(e^−30) = −9.3576230e-14
  const std::vector<float> b = {0, std::log(3.0f), -std::log(3.0f), 10};
  const std::vector<float> a = {0, 25, 19, -30};
  const std::vector<float> a_log = {0, std::log(2.0f), 0, 0};
  const std::vector<float> dt_bias = {0, 0, 2, 0};
  std::vector<float> beta(4, NAN), g(4, NAN);
  GdnGates(b.data(), a.data(), a_log.data(), dt_bias.data(), beta.data(), g.data(), 1, 4);
  EXPECT_NEAR(beta[0], 0.5, 1e-7);
  EXPECT_NEAR(beta[1], 0.75, 1e-7);
  EXPECT_NEAR(beta[2], 0.25, 1e-7);
  EXPECT_NEAR(beta[3], 0.9999546, 1e-7);
  EXPECT_NEAR(g[0], -0.6931472, 1e-7);
  EXPECT_NEAR(g[1], -50.0, 5e-5);
  EXPECT_NEAR(g[2], -21.0, 1e-6);
  EXPECT_NEAR(g[3], -9.3576230e-14, 1e-19);
}

TEST(GdnGates, MatchesNaivePerTokenAndHead) {
  const int64_t T = 5, Hv = 6;
  const std::vector<float> b = Uniform(T * Hv, 51, -6, 6), a = Uniform(T * Hv, 52, -25, 25);
  const std::vector<float> a_log = Uniform(Hv, 53, -2, 2), dt_bias = Uniform(Hv, 54, -3, 3);
  std::vector<float> beta(T * Hv, NAN), g(T * Hv, NAN);
  GdnGates(b.data(), a.data(), a_log.data(), dt_bias.data(), beta.data(), g.data(), T, Hv);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < Hv; ++j) {
      const int64_t i = t * Hv + j;
      const double x = static_cast<double>(a[i]) + dt_bias[j];
      const double sp = x > 20 ? x : std::log(1.0 + std::exp(x));
      const double want_g = -std::exp(static_cast<double>(a_log[j])) * sp;
      EXPECT_NEAR(beta[i], 1.0 / (1.0 + std::exp(-static_cast<double>(b[i]))), 1e-6) << i;
      EXPECT_NEAR(g[i], want_g, 2e-6 * std::fabs(want_g) + 1e-12) << i;
      EXPECT_LE(g[i], 0.0f) << i;  // a decay, never a growth
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Recurrence

TEST(GdnRecurrent, HandComputedScalarHead) {
  // dk = dv = 1, one head, q = k = 1 (k̂ = 1/sqrt(1 + 1e-6) ≈ 1, q̂ ≈ 1 · 1^(−1/2)), β = 0.5.
  //   t0: g = 0,     v = 2: S = 0;              mem = 0;   δ = 0.5·(2 − 0)     = 1;    S = 1;    o = 1
  //   t1: g = ln .5, v = 4: S = 0.5·1 = 0.5;    mem = 0.5; δ = 0.5·(4 − 0.5)   = 1.75; S = 2.25; o = 2.25
  // (Decaying after the read instead would give 1.25; reading the pre-update state, 0.5.)
  const GdnDims d{1, 1, 1, 1};
  const std::vector<float> q = {1, 1}, k = {1, 1}, v = {2, 4}, beta = {0.5f, 0.5f};
  const std::vector<float> g = {0, std::log(0.5f)};
  std::vector<float> state(1, 0.0f), o(2, NAN);
  GdnRecurrent(q.data(), k.data(), v.data(), beta.data(), g.data(), state.data(), o.data(), 2, d);
  EXPECT_NEAR(o[0], 1.0, 1e-5);
  EXPECT_NEAR(o[1], 2.25, 2.25e-5);
  EXPECT_NEAR(state[0], 2.25, 2.25e-5);
}

TEST(GdnRecurrent, HandComputedDeltaRuleOverwrites) {
  // dk = 2, dv = 1, β = 1, g = 0 (no decay): the delta rule replaces what a key stores.
  //   t0: k = (1,0), v = 3: S = [3, 0]ᵀ;  q = (1,0) → q̂ = (1/√2, 0) → o = 3/√2  = 2.1213203
  //   t1: k = (0,1), v = 5: mem = 0, S = [3, 5]ᵀ;  q = (1,1) → q̂ = (½, ½) → o = 4
  //   t2: k = (1,0), v = 1: mem = 3, δ = −2, S = [1, 5]ᵀ;  q = (1,0) → o = 1/√2 = 0.7071068
  const GdnDims d{1, 1, 2, 1};
  const std::vector<float> q = {1, 0, 1, 1, 1, 0}, k = {1, 0, 0, 1, 1, 0}, v = {3, 5, 1};
  const std::vector<float> beta = {1, 1, 1}, g = {0, 0, 0};
  std::vector<float> state(2, 0.0f), o(3, NAN);
  GdnRecurrent(q.data(), k.data(), v.data(), beta.data(), g.data(), state.data(), o.data(), 3, d);
  EXPECT_NEAR(o[0], 2.1213203, 1e-5);
  EXPECT_NEAR(o[1], 4.0, 4e-5);
  EXPECT_NEAR(o[2], 0.7071068, 1e-5);
  EXPECT_NEAR(state[0], 1.0, 1e-5);
  EXPECT_NEAR(state[1], 5.0, 5e-5);
}

TEST(GdnRecurrent, MatchesClosedFormWithExplicitMatrices) {
  const GdnDims d{2, 6, 8, 5};  // ratio 3, as in the model (48 value heads over 16 key heads)
  const int64_t T = 9;
  const Problem p = MakeProblem(d, T, 60, -1.0f, 0.0f);
  const std::vector<float> init = Uniform(d.value_heads * d.key_dim * d.value_dim, 65, -0.5f, 0.5f);
  std::vector<double> state_ref(init.begin(), init.end());
  const std::vector<double> want = ClosedForm(p, state_ref);
  std::vector<float> state = init, o(want.size(), NAN);
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), state.data(), o.data(), T, d);
  EXPECT_TRUE(NoNan(o));
  EXPECT_TRUE(AllClose(o, want, 1e-5));
  EXPECT_TRUE(AllClose(state, state_ref, 1e-5));
}

TEST(GdnRecurrent, ValueHeadsShareKeyHeadsConsecutively) {
  // Hk = 2, Hv = 4: value heads 0,1 read key head 0 and 2,3 read key head 1 (interleave
  // repeat, not tile). With identical v, β, g per value head, heads 0 and 1 agree, 2 and 3
  // agree, and 1 differs from 2.
  const GdnDims d{2, 4, 4, 3};
  const int64_t T = 3;
  Problem p = MakeProblem(d, T, 70);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 1; j < 4; ++j) {
      for (int64_t c = 0; c < 3; ++c) p.v[(t * 4 + j) * 3 + c] = p.v[(t * 4) * 3 + c];
      p.beta[t * 4 + j] = p.beta[t * 4];
      p.g[t * 4 + j] = p.g[t * 4];
    }
  }
  std::vector<float> state(4 * 4 * 3, 0.0f), o(T * 4 * 3, NAN);
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), state.data(), o.data(), T, d);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(o[(t * 4 + 0) * 3 + c], o[(t * 4 + 1) * 3 + c]);
      EXPECT_EQ(o[(t * 4 + 2) * 3 + c], o[(t * 4 + 3) * 3 + c]);
    }
  }
  double diff = 0;
  for (int64_t c = 0; c < 3; ++c) diff += std::fabs(o[(T * 4 - 3) * 3 + c] - o[(T * 4 - 2) * 3 + c]);
  EXPECT_GT(diff, 1e-3);
}

TEST(GdnRecurrent, QkScaleAndNormalizationAreInternal) {
  // q and k arrive raw: scaling them by any positive factor leaves the output unchanged.
  const GdnDims d{1, 2, 8, 4};
  const int64_t T = 4;
  const Problem p = MakeProblem(d, T, 80);
  Problem s = p;
  for (float& x : s.q) x *= 7.0f;
  for (float& x : s.k) x *= 0.125f;
  std::vector<float> st_a(2 * 8 * 4, 0.0f), st_b = st_a, oa(T * 2 * 4, NAN), ob(T * 2 * 4, NAN);
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st_a.data(), oa.data(), T, d);
  GdnRecurrent(s.q.data(), s.k.data(), s.v.data(), s.beta.data(), s.g.data(), st_b.data(), ob.data(), T, d);
  std::vector<double> want(oa.begin(), oa.end());
  EXPECT_TRUE(AllClose(ob, want, 1e-5));
}

TEST(GdnRecurrent, SplitCallsEqualOneCall) {
  const GdnDims d{2, 4, 8, 6};
  const int64_t T = 11, T1 = 4;
  const Problem p = MakeProblem(d, T, 90);
  const size_t n_state = d.value_heads * d.key_dim * d.value_dim;
  std::vector<float> st_one(n_state, 0.0f), o_one(T * d.value_heads * d.value_dim, NAN);
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st_one.data(), o_one.data(), T, d);
  std::vector<float> st(n_state, 0.0f), o(o_one.size(), NAN);
  const int64_t qk1 = T1 * d.key_heads * d.key_dim, v1 = T1 * d.value_heads * d.value_dim, h1 = T1 * d.value_heads;
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st.data(), o.data(), T1, d);
  GdnRecurrent(p.q.data() + qk1, p.k.data() + qk1, p.v.data() + v1, p.beta.data() + h1, p.g.data() + h1,
               st.data(), o.data() + v1, T - T1, d);
  EXPECT_EQ(o, o_one);  // per-token arithmetic is identical: bitwise equal
  EXPECT_EQ(st, st_one);
}

// ---------------------------------------------------------------------------------------------
// Chunked form

struct ChunkCase {
  float g_lo, g_hi;
  const char* name;
};

TEST(GdnChunked, EqualsRecurrentForAllLengthsAndChunkSizes) {
  const GdnDims d{2, 4, 32, 16};
  const size_t n_state = d.value_heads * d.key_dim * d.value_dim;
  const ChunkCase cases[] = {{-0.3f, 0.0f, "mild decay"},
                             {0.0f, 0.0f, "no decay"},
                             {-6.0f, -1.0f, "strong decay"}};
  uint32_t seed = 100;
  for (const ChunkCase& cc : cases) {
    for (int64_t T : {1, 5, 63, 64, 65, 130}) {
      const Problem p = MakeProblem(d, T, seed += 10, cc.g_lo, cc.g_hi);
      // A non-zero carried state, as after an earlier prefill or decode.
      const std::vector<float> init = Uniform(n_state, seed + 7, -0.5f, 0.5f);
      std::vector<float> st_ref = init, o_ref(T * d.value_heads * d.value_dim, NAN);
      GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st_ref.data(), o_ref.data(), T, d);
      const std::vector<double> o_want(o_ref.begin(), o_ref.end()), st_want(st_ref.begin(), st_ref.end());
      for (int64_t chunk : {1, 16, 64}) {
        std::vector<float> st = init, o(o_ref.size(), NAN);
        GdnChunked(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st.data(), o.data(), T, d, chunk);
        EXPECT_TRUE(NoNan(o)) << cc.name << " T=" << T << " chunk=" << chunk;
        EXPECT_TRUE(AllClose(o, o_want, 1e-5)) << cc.name << " T=" << T << " chunk=" << chunk;
        EXPECT_TRUE(AllClose(st, st_want, 1e-5)) << cc.name << " T=" << T << " chunk=" << chunk;
      }
    }
  }
}

TEST(GdnChunked, DefaultChunkIs64AndMatchesClosedForm) {
  const GdnDims d{1, 3, 16, 8};
  const int64_t T = 70;
  const Problem p = MakeProblem(d, T, 200);
  std::vector<double> st_ref(d.value_heads * d.key_dim * d.value_dim, 0.0);
  const std::vector<double> want = ClosedForm(p, st_ref);
  std::vector<float> st(st_ref.size(), 0.0f), o(want.size(), NAN);
  GdnChunked(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st.data(), o.data(), T, d);
  EXPECT_TRUE(AllClose(o, want, 1e-5));
  EXPECT_TRUE(AllClose(st, st_ref, 1e-5));
}

TEST(GdnChunked, CarriesStateAcrossCallsAndMixesWithDecode) {
  // Prefill 70 tokens chunked, then 60 more chunked (not multiples of the chunk), then 3 decode
  // steps, against one recurrent pass over all 133 tokens.
  const GdnDims d{2, 4, 16, 8};
  const int64_t parts[] = {70, 60, 1, 1, 1};
  int64_t T = 0;
  for (int64_t n : parts) T += n;
  const Problem p = MakeProblem(d, T, 300);
  const size_t n_state = d.value_heads * d.key_dim * d.value_dim;
  std::vector<float> st_ref(n_state, 0.0f), o_ref(T * d.value_heads * d.value_dim, NAN);
  GdnRecurrent(p.q.data(), p.k.data(), p.v.data(), p.beta.data(), p.g.data(), st_ref.data(), o_ref.data(), T, d);

  std::vector<float> st(n_state, 0.0f), o(o_ref.size(), NAN);
  int64_t t0 = 0;
  for (int64_t n : parts) {
    const int64_t qk = t0 * d.key_heads * d.key_dim, vv = t0 * d.value_heads * d.value_dim, hh = t0 * d.value_heads;
    if (n > 1) {
      GdnChunked(p.q.data() + qk, p.k.data() + qk, p.v.data() + vv, p.beta.data() + hh, p.g.data() + hh,
                 st.data(), o.data() + vv, n, d, 64);
    } else {
      GdnRecurrent(p.q.data() + qk, p.k.data() + qk, p.v.data() + vv, p.beta.data() + hh, p.g.data() + hh,
                   st.data(), o.data() + vv, n, d);
    }
    t0 += n;
  }
  EXPECT_TRUE(NoNan(o));
  EXPECT_TRUE(AllClose(o, std::vector<double>(o_ref.begin(), o_ref.end()), 1e-5));
  EXPECT_TRUE(AllClose(st, std::vector<double>(st_ref.begin(), st_ref.end()), 1e-5));
}

}  // namespace
}  // namespace q38::cpu
