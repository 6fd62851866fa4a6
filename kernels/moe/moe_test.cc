// Tests of the MoE references (docs/model.md §9, §14): the softmax router's top-k by hand and
// against a naive selection, NVFP4 dequantization of hand-packed bytes, and the routed SwiGLU
// experts (dense and NVFP4) against an explicit per-token, per-expert evaluation.
#include "kernels/moe/moe.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::AllClose;
using op_test::SiluD;

// (id, weight) pairs of one token, sorted by id, so the test does not depend on output order.
std::vector<std::pair<int32_t, float>> Routed(const std::vector<int32_t>& idx, const std::vector<float>& w,
                                              int64_t t, int64_t k) {
  std::vector<std::pair<int32_t, float>> r;
  for (int64_t j = 0; j < k; ++j) r.push_back({idx[t * k + j], w[t * k + j]});
  std::sort(r.begin(), r.end());
  return r;
}

// Routes one token over logits.size() experts: the top k as (id, weight) pairs sorted by id. The
// outputs start as −7 and NaN, so an entry the router does not write shows.
std::vector<std::pair<int32_t, float>> RouteOneToken(const std::vector<float>& logits, int64_t k) {
  std::vector<int32_t> idx(k, -7);
  std::vector<float> w(k, NAN);
  RouterTopK(logits.data(), idx.data(), w.data(), 1, static_cast<int64_t>(logits.size()), k);
  return Routed(idx, w, 0, k);
}

// Expects the routed pairs `got` to be `want`: the same expert ids, weights within 1e-6.
void ExpectRouted(const std::vector<std::pair<int32_t, float>>& got,
                  const std::vector<std::pair<int32_t, double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got[j].first, want[j].first) << "pair " << j;
    EXPECT_NEAR(got[j].second, want[j].second, 1e-6) << "pair " << j;
  }
}

// ---------------------------------------------------------------------------------------------
// Router

TEST(RouterTopK, HandComputed) {
  // logits (0, ln 2, ln 3, 0) → p ∝ (1, 2, 3, 1) / 7. Top 2: experts 2 (3/7) and 1 (2/7),
  // renormalized: 3/5 = 0.6 and 2/5 = 0.4.
  const std::vector<float> logits = {0, std::log(2.0f), std::log(3.0f), 0};
  ExpectRouted(RouteOneToken(logits, 2), {{1, 0.4}, {2, 0.6}});
}

TEST(RouterTopK, TiesPickTheLowerExpertId) {
  // All equal, k = 3 of 8: experts 0, 1, 2 with weight 1/3 each.
  ExpectRouted(RouteOneToken(std::vector<float>(8, 0.7f), 3),
               {{0, 1.0 / 3.0}, {1, 1.0 / 3.0}, {2, 1.0 / 3.0}});
  // A tie at the boundary: logits (5, 1, 3, 3, 3, 0), k = 2 → experts 0 and 2 (not 3 or 4).
  // Weights e⁵/(e⁵ + e³) = 1/(1 + e⁻²) = 0.8807971 and 0.1192029.
  ExpectRouted(RouteOneToken({5, 1, 3, 3, 3, 0}, 2), {{0, 0.8807971}, {2, 0.1192029}});
}

TEST(RouterTopK, LargeLogitsStayFinite) {
  // logits (1000, 999, −1000): top 2 weights 1/(1 + e⁻¹) = 0.7310586 and 0.2689414.
  ExpectRouted(RouteOneToken({1000, 999, -1000}, 2), {{0, 0.7310586}, {1, 0.2689414}});
}

TEST(RouterTopK, MatchesNaiveSelectionAndWeightsSumToOne) {
  // The model's shape (E = 512, k = 10) for a few tokens. Naive: softmax in double, then k
  // rounds of "take the first maximum not taken yet", then divide by the sum.
  const int64_t T = 4, E = 512, k = 10;
  const std::vector<float> logits = Uniform(T * E, 501, -4, 4);
  std::vector<int32_t> idx(T * k, -7);
  std::vector<float> w(T * k, NAN);
  RouterTopK(logits.data(), idx.data(), w.data(), T, E, k);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> p(E);
    double mx = -INFINITY, z = 0;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[t * E + e]));
    for (int64_t e = 0; e < E; ++e) z += p[e] = std::exp(logits[t * E + e] - mx);
    for (double& x : p) x /= z;
    std::vector<bool> taken(E, false);
    std::vector<std::pair<int32_t, double>> want;
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      taken[best] = true;
      want.push_back({static_cast<int32_t>(best), p[best]});
      sum += p[best];
    }
    std::sort(want.begin(), want.end());
    const auto got = Routed(idx, w, t, k);
    double wsum = 0;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(got[j].first, want[j].first) << t;
      EXPECT_NEAR(got[j].second, want[j].second / sum, 1e-6) << t;
      EXPECT_GE(got[j].second, 0.0f);
      wsum += got[j].second;
    }
    EXPECT_NEAR(wsum, 1.0, 1e-6) << t;
  }
}

// ---------------------------------------------------------------------------------------------
// NVFP4

// Test-side decoders, written from docs/model.md §14.1 (not from common/dtype).
double E2m1(uint8_t code) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8 ? -1.0 : 1.0) * kMag[code & 7];
}
double E4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}
// The dense [E, N, K] weights the packed bytes stand for.
std::vector<double> DecodeAll(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales,
                              const std::vector<float>& ga, const std::vector<float>& gb, int64_t split,
                              int64_t E, int64_t N, int64_t K) {
  std::vector<double> w(E * N * K);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < K; ++c) {
        const uint8_t byte = codes[(e * N + n) * (K / 2) + c / 2];
        const uint8_t code = c % 2 == 0 ? byte & 0xF : byte >> 4;
        w[(e * N + n) * K + c] =
            E2m1(code) * E4m3(scales[(e * N + n) * (K / 16) + c / 16]) * (n < split ? ga[e] : gb[e]);
      }
  return w;
}

TEST(DequantizeNvfp4Row, HandPackedBytes) {
  // E = 2 experts, N = 4 rows (split 2: rows 0,1 use global_a, rows 2,3 global_b), K = 32
  // (16 bytes and 2 E4M3 scales per row).
  const int64_t E = 2, N = 4, K = 32;
  std::vector<uint8_t> codes(E * N * K / 2, 0x00), scales(E * N * K / 16, 0x38);
  const std::vector<float> ga = {2.0f, 0.5f}, gb = {3.0f, 0.25f};
  // Expert 1, row 3 (global_b[1] = 0.25). Low nibble = element 2j, high nibble = 2j+1.
  //   byte 0x21 → codes (1, 2)  → (0.5, 1)       byte 0x43 → (1.5, 2)    byte 0x65 → (3, 4)
  //   byte 0x87 → (6, −0)                        byte 0xA9 → (−0.5, −1)  byte 0xCB → (−1.5, −2)
  //   byte 0xED → (−3, −4)                       byte 0x0F → (−6, 0)
  //   block 1: 0x70 → (0, 6), 0x07 → (6, 0), 0xF8 → (−0, −6), 0x11 → (0.5, 0.5), then zeros.
  //   scale bytes: block 0 = 0x38 → 2⁰·1 = 1;  block 1 = 0x4C → exponent 9−7 = 2, mantissa 4/8 →
  //   4·1.5 = 6.  Element = e2m1 · scale · 0.25: block 0 × 0.25, block 1 × 1.5.
  const uint8_t row[16] = {0x21, 0x43, 0x65, 0x87, 0xA9, 0xCB, 0xED, 0x0F,
                           0x70, 0x07, 0xF8, 0x11, 0x00, 0x00, 0x00, 0x00};
  std::copy(row, row + 16, codes.begin() + (1 * N + 3) * 16);
  scales[(1 * N + 3) * 2 + 0] = 0x38;
  scales[(1 * N + 3) * 2 + 1] = 0x4C;
  // Expert 0, row 0 (global_a[0] = 2): every byte 0x22 → elements 1.0; scales 0x01 (subnormal
  // 1/8 · 2⁻⁶ = 2⁻⁹) and 0x7E (exponent 15−7 = 8, mantissa 6/8: 1.75 · 256 = 448, the E4M3 max).
  //   block 0: 1 · 2⁻⁹ · 2 = 2⁻⁸ = 0.00390625;  block 1: 1 · 448 · 2 = 896.
  std::fill(codes.begin(), codes.begin() + 16, 0x22);
  scales[0] = 0x01;
  scales[1] = 0x7E;
  // Expert 0, row 2 (global_b[0] = 3): byte 0 = 0x21 → (0.5, 1) · 1 · 3 = (1.5, 3), rest 0.
  codes[2 * 16] = 0x21;

  const Nvfp4Experts x{codes.data(), scales.data(), ga.data(), gb.data(), 2, N, K};
  std::vector<float> out(K, NAN);

  DequantizeNvfp4Row(x, 1, 3, out.data());
  const float want13[32] = {0.125f, 0.25f, 0.375f, 0.5f, 0.75f, 1.0f, 1.5f, 0.0f,
                            -0.125f, -0.25f, -0.375f, -0.5f, -0.75f, -1.0f, -1.5f, 0.0f,
                            0, 9, 9, 0, 0, -9, 0.75f, 0.75f, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int c = 0; c < 32; ++c) EXPECT_EQ(out[c], want13[c]) << c;  // exact: all dyadic

  DequantizeNvfp4Row(x, 0, 0, out.data());
  for (int c = 0; c < 16; ++c) EXPECT_EQ(out[c], 0.00390625f) << c;
  for (int c = 16; c < 32; ++c) EXPECT_EQ(out[c], 896.0f) << c;

  DequantizeNvfp4Row(x, 0, 2, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], 3.0f);
  for (int c = 2; c < 32; ++c) EXPECT_EQ(out[c], 0.0f) << c;

  // Expert 1 row 0 is all-zero codes: zeros (global_a path), no NaN.
  DequantizeNvfp4Row(x, 1, 0, out.data());
  for (int c = 0; c < 32; ++c) EXPECT_EQ(out[c], 0.0f) << c;
}

TEST(DequantizeNvfp4Row, RandomBytesMatchTestDecoder) {
  const int64_t E = 3, N = 6, K = 48, split = 4;
  std::mt19937 rng(510);
  std::vector<uint8_t> codes(E * N * K / 2), scales(E * N * K / 16);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
  // Positive, finite E4M3 scales (0x01..0x7E), as the checkpoints hold.
  for (uint8_t& b : scales) b = static_cast<uint8_t>(1 + rng() % 0x7E);
  const std::vector<float> ga = {0.001f, 0.5f, 3.0f}, gb = {0.25f, 7.0f, 0.0625f};
  const std::vector<double> want = DecodeAll(codes, scales, ga, gb, split, E, N, K);
  const Nvfp4Experts x{codes.data(), scales.data(), ga.data(), gb.data(), split, N, K};
  std::vector<float> out(K, NAN);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t n = 0; n < N; ++n) {
      DequantizeNvfp4Row(x, e, n, out.data());
      for (int64_t c = 0; c < K; ++c) {
        // code · scale is exact; the single rounding is the float multiply by the global.
        EXPECT_NEAR(out[c], want[(e * N + n) * K + c], 1e-7 * std::fabs(want[(e * N + n) * K + c])) << e << " " << n << " " << c;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Routed experts

// Naive: for every token and chosen expert, gate = W1·h, up = W3·h, a = silu(gate)·up,
// y = W2·a; out = Σ w·y. Weights are the dense [E, 2I, H] and [E, H, I] in double.
std::vector<double> NaiveExperts(const std::vector<float>& h, const std::vector<int32_t>& idx,
                                 const std::vector<float>& w, const std::vector<double>& gu,
                                 const std::vector<double>& dn, int64_t T, int64_t k, int64_t H, int64_t I) {
  std::vector<double> out(T * H, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = idx[t * k + j];
      std::vector<double> a(I);
      for (int64_t i = 0; i < I; ++i) {
        double gate = 0, up = 0;
        for (int64_t c = 0; c < H; ++c) {
          gate += gu[(e * 2 * I + i) * H + c] * h[t * H + c];
          up += gu[(e * 2 * I + I + i) * H + c] * h[t * H + c];
        }
        a[i] = SiluD(gate) * up;
      }
      for (int64_t c = 0; c < H; ++c) {
        double y = 0;
        for (int64_t i = 0; i < I; ++i) y += dn[(e * H + c) * I + i] * a[i];
        out[t * H + c] += w[t * k + j] * y;
      }
    }
  }
  return out;
}

TEST(RoutedExperts, HandComputedDense) {
  // H = 2, I = 1, one expert, weight 1. gate row (1, 0), up row (0, 1), down ((2), (3)).
  // h = (1, 2): gate = 1, up = 2, a = silu(1)·2 = 0.7310586·2 = 1.4621172;
  // out = (2, 3)·1.4621172 = (2.9242344, 4.3863515).
  const std::vector<float> gu = {1, 0, 0, 1}, dn = {2, 3}, h = {1, 2}, w = {1};
  const std::vector<int32_t> idx = {0};
  std::vector<float> out(2, NAN);
  RoutedExperts(h.data(), idx.data(), w.data(), DenseExperts{gu.data(), 2, 2}, DenseExperts{dn.data(), 2, 1},
                out.data(), 1, 1);
  EXPECT_NEAR(out[0], 2.9242344, 1e-6);
  EXPECT_NEAR(out[1], 4.3863515, 1e-6);
}

TEST(RoutedExperts, DenseMatchesNaive) {
  const int64_t T = 3, H = 8, I = 4, E = 5, k = 2;
  const std::vector<float> gu = Uniform(E * 2 * I * H, 520), dn = Uniform(E * H * I, 521);
  const std::vector<float> h = Uniform(T * H, 522, -2, 2);
  const std::vector<int32_t> idx = {4, 1, 0, 3, 2, 4};
  const std::vector<float> w = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f};
  std::vector<float> out(T * H, NAN);
  RoutedExperts(h.data(), idx.data(), w.data(), DenseExperts{gu.data(), 2 * I, H}, DenseExperts{dn.data(), H, I},
                out.data(), T, k);
  const std::vector<double> want = NaiveExperts(h, idx, w, std::vector<double>(gu.begin(), gu.end()),
                                                std::vector<double>(dn.begin(), dn.end()), T, k, H, I);
  EXPECT_TRUE(AllClose(out, want, 1e-5));
}

// Random NVFP4 weights of one layer's experts: codes uniform, scales with exponent field 4..6
// (2⁻³..2⁻¹) so the activations stay O(1), and the given globals, one per expert.
struct RandomNvfp4Layer {
  int64_t E, I, H;
  std::vector<uint8_t> gu_codes, gu_scales, dn_codes, dn_scales;
  std::vector<float> g_gate, g_up, g_down;
  RandomNvfp4Layer(int64_t E_, int64_t I_, int64_t H_, uint32_t seed, std::vector<float> gate, std::vector<float> up,
                   std::vector<float> dn)
      : E(E_), I(I_), H(H_), gu_codes(E * 2 * I * H / 2), gu_scales(E * 2 * I * H / 16), dn_codes(E * H * I / 2),
        dn_scales(E * H * I / 16), g_gate(std::move(gate)), g_up(std::move(up)), g_down(std::move(dn)) {
    std::mt19937 rng(seed);
    for (auto* v : {&gu_codes, &dn_codes})
      for (uint8_t& b : *v) b = static_cast<uint8_t>(rng());
    for (auto* v : {&gu_scales, &dn_scales})
      for (uint8_t& b : *v) b = static_cast<uint8_t>(((4 + rng() % 3) << 3) | (rng() % 8));
  }
  Nvfp4Experts gate_up() const { return {gu_codes.data(), gu_scales.data(), g_gate.data(), g_up.data(), I, 2 * I, H}; }
  Nvfp4Experts down() const { return {dn_codes.data(), dn_scales.data(), g_down.data(), g_down.data(), H, H, I}; }
};

TEST(RoutedExperts, Nvfp4MatchesNaiveOnDecodedWeights) {
  // Gate and up carry different globals (split at I) to check each half uses its own.
  const int64_t T = 2, H = 32, I = 16, E = 3, k = 2;
  const RandomNvfp4Layer x(E, I, H, 530, {0.5f, 0.25f, 1.0f}, {0.125f, 2.0f, 0.75f}, {0.5f, 0.3f, 0.2f});
  const Nvfp4Experts gu = x.gate_up(), dn = x.down();
  const std::vector<float> h = Uniform(T * H, 531, -1, 1);
  const std::vector<int32_t> idx = {2, 0, 1, 2};
  const std::vector<float> w = {0.6f, 0.4f, 0.25f, 0.75f};
  std::vector<float> out(T * H, NAN);
  RoutedExperts(h.data(), idx.data(), w.data(), gu, dn, out.data(), T, k);
  const std::vector<double> want =
      NaiveExperts(h, idx, w, DecodeAll(x.gu_codes, x.gu_scales, x.g_gate, x.g_up, I, E, 2 * I, H),
                   DecodeAll(x.dn_codes, x.dn_scales, x.g_down, x.g_down, H, E, H, I), T, k, H, I);
  EXPECT_TRUE(AllClose(out, want, 1e-5));
}

// The fast path: tokens grouped by expert, NVFP4 decoded by tile. Its decoded weights are the
// reference's bits, so it differs from the reference only by FP32 accumulation order. Enough
// tokens to span two token chunks (256) and experts with many, one and no tokens.
TEST(RoutedExpertsFast, MatchesTheReferenceNvfp4AndDense) {
  const int64_t T = 300, H = 48, I = 80, E = 5, k = 2;  // I = 80: 2I = 160 rows, three tiles of 64
  const RandomNvfp4Layer x(E, I, H, 540, {0.5f, 0.25f, 1.0f, 0.3f, 0.9f}, {0.125f, 2.0f, 0.75f, 1.5f, 0.2f},
                           {0.5f, 0.3f, 0.2f, 0.7f, 1.1f});
  const Nvfp4Experts gu = x.gate_up(), dn = x.down();
  const std::vector<float> h = Uniform(T * H, 541, -1, 1);
  std::vector<int32_t> idx(T * k);
  std::vector<float> w(T * k);
  for (int64_t t = 0; t < T; ++t) {
    // Expert 4 takes no token, expert 3 only token 7; the rest share the others.
    idx[t * k] = t == 7 ? 3 : static_cast<int32_t>(t % 3);
    idx[t * k + 1] = static_cast<int32_t>((t + 1) % 3);
    w[t * k] = 0.25f + 0.5f * (t % 2);
    w[t * k + 1] = 1.0f - w[t * k];
  }
  std::vector<float> want(T * H), got(T * H, NAN);
  RoutedExperts(h.data(), idx.data(), w.data(), gu, dn, want.data(), T, k);
  RoutedExpertsFast(h.data(), idx.data(), w.data(), gu, dn, got.data(), T, k);
  EXPECT_TRUE(AllClose(got, want, 1e-5));

  std::vector<float> gu_dense(E * 2 * I * H), dn_dense(E * H * I);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t n = 0; n < 2 * I; ++n) DequantizeNvfp4Row(gu, e, n, gu_dense.data() + (e * 2 * I + n) * H);
    for (int64_t n = 0; n < H; ++n) DequantizeNvfp4Row(dn, e, n, dn_dense.data() + (e * H + n) * I);
  }
  std::vector<float> dense_got(T * H, NAN);
  RoutedExpertsFast(h.data(), idx.data(), w.data(), DenseExperts{gu_dense.data(), 2 * I, H},
                    DenseExperts{dn_dense.data(), H, I}, dense_got.data(), T, k);
  // The same weights as FP32 and the same order of work: the same bits as the NVFP4 fast path.
  EXPECT_EQ(dense_got, got);
}

// ---------------------------------------------------------------------------------------------
// SiluMul, AddSigmoidGated

TEST(SiluMul, HandComputed) {
  // I = 3, two rows. Row 0: gu = (0, 1, 2 | 3, 4, 5):
  //   y = (silu(0)·3, silu(1)·4, silu(2)·5) = (0, 0.7310586·4, 1.7615942·5) = (0, 2.9242344, 8.8079708)
  // Row 1: gu = (−1, 0, 0 | 2, 9, 9): y = (−0.2689414·2, 0, 0) = (−0.5378828, 0, 0)
  const std::vector<float> gu = {0, 1, 2, 3, 4, 5, -1, 0, 0, 2, 9, 9};
  std::vector<float> y(6, NAN);
  SiluMul(gu.data(), y.data(), 2, 3);
  const double want[6] = {0, 2.9242344, 8.8079708, -0.5378828, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

TEST(AddSigmoidGated, HandComputedWithStride) {
  // gate logits read with stride 3 (a fused router|gate output): t0 → 0, t1 → ln 3.
  //   t0: out (1, 2)  += 0.5  · (2, 2)  → (2, 3)
  //   t1: out (3, 4)  += 0.75 · (4, −4) → (6, 1)
  std::vector<float> out = {1, 2, 3, 4};
  const std::vector<float> shared = {2, 2, 4, -4};
  const std::vector<float> logits = {0, 99, 99, std::log(3.0f), 99, 99};
  AddSigmoidGated(out.data(), shared.data(), logits.data(), 3, 2, 2);
  EXPECT_NEAR(out[0], 2.0, 1e-6);
  EXPECT_NEAR(out[1], 3.0, 1e-6);
  EXPECT_NEAR(out[2], 6.0, 1e-6);
  EXPECT_NEAR(out[3], 1.0, 1e-6);
}

}  // namespace
}  // namespace q38::cpu
