// Tests of the hyper-connection ops (docs/model.md §3, §5) by hand and against naive loops.
#include "kernels/hc/hc.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::SigmoidD;

TEST(EmbedStreams, CopiesTheRowIntoEveryStream) {
  // Table of 5 rows × H = 3 (row r = (10r, 10r+1, 10r+2)); ids (4, 0, 4); S = 4 streams:
  // X[t] = concat of 4 copies of row ids[t].
  const int64_t V = 5, H = 3, S = 4, T = 3;
  std::vector<float> table(V * H);
  for (int64_t r = 0; r < V; ++r)
    for (int64_t c = 0; c < H; ++c) table[r * H + c] = static_cast<float>(10 * r + c);
  const std::vector<int32_t> ids = {4, 0, 4};
  std::vector<float> X(T * S * H, NAN);
  EmbedStreams(table.data(), ids.data(), X.data(), T, S, H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t c = 0; c < H; ++c) EXPECT_EQ(X[(t * S + s) * H + c], 10.0f * ids[t] + c) << t << s << c;
}

TEST(HcGates, HandComputedWithInject) {
  // R = 3, S = 4, one token; di = (4, −4, 0 | 0, 8, −8, 4):
  //   a = silu(di[:3] / 4) = (silu 1, silu −1, silu 0) = (0.7310586, −0.2689414, 0)
  //   g = 2·sigmoid(di[3:] / 4) = 2·sigmoid(0, 2, −2, 1) = (1, 1.7615942, 0.2384058, 1.4621172)
  const std::vector<float> di = {4, -4, 0, 0, 8, -8, 4};
  std::vector<float> a(3, NAN), g(4, NAN);
  HcGates(di.data(), a.data(), g.data(), 1, 3, 4, true);
  const double want_a[3] = {0.7310586, -0.2689414, 0};
  const double want_g[4] = {1, 1.7615942, 0.2384058, 1.4621172};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(a[i], want_a[i], 1e-6) << i;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g[i], want_g[i], 1e-6) << i;
}

TEST(HcGates, MixerHasNoInjectButStillDividesByStreamCount) {
  // The final mixer: di is R wide (no inject columns), a = silu(di / hc_count) with hc_count 4
  // (docs/model.md §5: the module without inject rows), g untouched. Two tokens, R = 2:
  //   di = (8, −2 | 2, 0) → a = (silu 2, silu −0.5 | silu 0.5, 0)
  //      = (1.7615942, −0.1887703 | 0.3112297, 0)
  const std::vector<float> di = {8, -2, 2, 0};
  std::vector<float> a(4, NAN);
  HcGates(di.data(), a.data(), nullptr, 2, 2, 4, false);
  const double want[4] = {1.7615942, -0.1887703, 0.3112297, 0};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a[i], want[i], 1e-6) << i;
}

TEST(HcGates, MatchesNaiveOverRows) {
  const int64_t T = 3, R = 7, S = 4;
  const std::vector<float> di = Uniform(T * (R + S), 601, -10, 10);
  std::vector<float> a(T * R, NAN), g(T * S, NAN);
  HcGates(di.data(), a.data(), g.data(), T, R, S, true);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < R; ++r) {
      const double x = di[t * (R + S) + r] / 4.0;
      EXPECT_NEAR(a[t * R + r], x * SigmoidD(x), 1e-6 * std::max(1.0, std::fabs(x)));
    }
    for (int64_t s = 0; s < S; ++s) {
      const double want = 2.0 * SigmoidD(di[t * (R + S) + R + s] / 4.0);
      EXPECT_NEAR(g[t * S + s], want, 1e-6);
      EXPECT_GT(g[t * S + s], 0.0f);
      EXPECT_LT(g[t * S + s], 2.0f);
    }
  }
}

TEST(HcCombine, HandComputed) {
  // S = 2, H = 2: m = (0, 0 | 100, −100), Xn = (2, 4 | 6, 8)
  //   sigmoid(m) = (0.5, 0.5 | 1, ~0)
  //   h = ((0.5·2 + 1·6)/2, (0.5·4 + 0·8)/2) = (3.5, 1)
  const std::vector<float> m = {0, 0, 100, -100}, xn = {2, 4, 6, 8};
  std::vector<float> h(2, NAN);
  HcCombine(m.data(), xn.data(), h.data(), 1, 2, 2);
  EXPECT_NEAR(h[0], 3.5, 1e-6);
  EXPECT_NEAR(h[1], 1.0, 1e-6);
}

TEST(HcCombine, MatchesNaiveMeanOverStreams) {
  const int64_t T = 2, S = 4, H = 16;
  const std::vector<float> m = Uniform(T * S * H, 611, -5, 5), xn = Uniform(T * S * H, 612, -3, 3);
  std::vector<float> h(T * H, NAN);
  HcCombine(m.data(), xn.data(), h.data(), T, S, H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < H; ++c) {
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += SigmoidD(m[(t * S + s) * H + c]) * xn[(t * S + s) * H + c];
      EXPECT_NEAR(h[t * H + c], sum / S, 1e-6) << t << " " << c;
    }
  }
}

TEST(HcResidual, HandComputed) {
  // S = 2, H = 2, one token: X = (1, 2 | 3, 4), g = (1, 0.5), y = (10, −2):
  //   X' = (1 + 10, 2 − 2 | 3 + 5, 4 − 1) = (11, 0 | 8, 3)
  std::vector<float> X = {1, 2, 3, 4};
  const std::vector<float> g = {1, 0.5f}, y = {10, -2};
  HcResidual(X.data(), g.data(), y.data(), 1, 2, 2);
  EXPECT_EQ(X, (std::vector<float>{11, 0, 8, 3}));
}

TEST(HcResidual, MatchesNaivePerTokenAndStream) {
  const int64_t T = 3, S = 4, H = 8;
  std::vector<float> X = Uniform(T * S * H, 621);
  const std::vector<float> X0 = X, g = Uniform(T * S, 622, 0, 2), y = Uniform(T * H, 623);
  HcResidual(X.data(), g.data(), y.data(), T, S, H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t c = 0; c < H; ++c) {
        const int64_t i = (t * S + s) * H + c;
        EXPECT_NEAR(X[i], X0[i] + static_cast<double>(g[t * S + s]) * y[t * H + c], 1e-6) << i;
      }
}

// The fused pre step (Backend::HcPre) on the CPU backend is bitwise the composition it stands for
// (Backend's default: RmsNorm, Linear, HcGates, Linear, HcCombine through the backend's ops), with
// inject and without (the final mixer), norm weights of H and of S·H, one token and several.
TEST(HcPre, EqualsTheCompositionBitwise) {
  std::unique_ptr<Backend> b = MakeCpuBackend();
  for (auto [T, S, H, R] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 4, 64, 16}, {3, 4, 64, 16},
                            {1, 3, 40, 7}, {2, 4, 256, 16}}) {
    for (bool inject : {true, false}) {
      for (bool norm_per_row : {true, false}) {
        const int64_t W = S * H, rows = R + (inject ? S : 0), norm_len = norm_per_row ? W : H;
        Buffer X = b->UploadF32(op_test::Uniform(T * W, 1, -3, 3), {T, W});
        Buffer norm = b->Upload(op_test::Uniform(norm_len, 2, -0.2f, 0.2f), {norm_len});
        Buffer down = b->Upload(op_test::Uniform(rows * W, 3, -0.1f, 0.1f), {rows, W});
        Buffer up = b->Upload(op_test::Uniform(W * R, 4, -0.3f, 0.3f), {W, R});
        Buffer h1 = b->Alloc(DType::kF32, {T, H}), h2 = b->Alloc(DType::kF32, {T, H});
        Buffer g1 = b->Alloc(DType::kF32, {T, S}), g2 = b->Alloc(DType::kF32, {T, S});
        b->Fill(g1.t(), NAN);
        b->Fill(g2.t(), NAN);
        b->HcPre(X.t(), norm.t(), down.t(), up.t(), h1.t(), g1.t(), S, 1e-6f);
        b->Backend::HcPre(X.t(), norm.t(), down.t(), up.t(), h2.t(), g2.t(), S, 1e-6f);
        const float* p1 = h1.t().as<float>();
        const float* p2 = h2.t().as<float>();
        for (int64_t i = 0; i < T * H; ++i) {
          ASSERT_EQ(std::memcmp(p1 + i, p2 + i, 4), 0) << "h " << i << ": " << p1[i] << " vs " << p2[i];
          ASSERT_TRUE(std::isfinite(p1[i]));
        }
        const float* q1 = g1.t().as<float>();
        const float* q2 = g2.t().as<float>();
        for (int64_t i = 0; i < T * S; ++i) {
          if (inject) {
            ASSERT_EQ(q1[i], q2[i]) << "g " << i;
            ASSERT_TRUE(std::isfinite(q1[i]));
          } else {
            ASSERT_TRUE(std::isnan(q1[i])) << "g written without inject";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace q38::cpu
