// Tests of the RMSNorm references (docs/model.md §4) against hand arithmetic, an independent
// re-implementation in double, and the invariants that tie the variants together.
#include "kernels/norm/norm.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::AllClose;
using op_test::SigmoidD;

constexpr float kEps = 1e-6f;

// Independent RMSNorm: per group, y = x / sqrt(mean(x²) + eps) · (offset + w), in double.
std::vector<double> NaiveRms(const std::vector<float>& x, const std::vector<float>& w, int64_t rows,
                             int64_t n, int64_t group, bool zero_centred) {
  std::vector<double> y(x.size());
  const int64_t groups = n / group;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      double ss = 0;
      for (int64_t i = 0; i < group; ++i) {
        const double v = x[r * n + gi * group + i];
        ss += v * v;
      }
      const double rms = std::sqrt(ss / group + kEps);
      for (int64_t i = 0; i < group; ++i) {
        const int64_t col = gi * group + i;
        // A weight of row length indexes by column; of group length, by position in the group.
        const double wi = w.size() == static_cast<size_t>(n) ? w[col] : w[i];
        y[r * n + col] = x[r * n + col] / rms * ((zero_centred ? 1.0 : 0.0) + wi);
      }
    }
  }
  return y;
}

TEST(RmsNorm, HandComputed) {
  // x = (3, 4): mean(x²) = (9 + 16)/2 = 12.5, rms = sqrt(12.5 + 1e-6) = 3.5355340...
  // conventional w = (2, 0.5): y = (2·3, 0.5·4)/3.5355340 = (1.6970562, 0.5656854)
  // zero-centred w = (1, −0.5): scale (2, 0.5): the same numbers.
  const std::vector<float> x = {3, 4};
  std::vector<float> y(2, NAN);
  const std::vector<float> w_conv = {2, 0.5f}, w_zc = {1, -0.5f};
  RmsNorm(x.data(), w_conv.data(), y.data(), 1, 2, 2, 2, kEps, false);
  EXPECT_NEAR(y[0], 1.6970562, 1e-6);
  EXPECT_NEAR(y[1], 0.5656854, 1e-6);
  RmsNorm(x.data(), w_zc.data(), y.data(), 1, 2, 2, 2, kEps, true);
  EXPECT_NEAR(y[0], 1.6970562, 1e-6);
  EXPECT_NEAR(y[1], 0.5656854, 1e-6);
}

TEST(RmsNorm, EpsIsInsideTheSquareRoot) {
  // x = (1e-3, −1e-3): mean(x²) = 1e-6, so rms = sqrt(1e-6 + 1e-6) = 1.41421356e-3 and
  // y = ±1/sqrt(2) = ±0.70710678. (eps outside the root would give ≈ ±1.)
  const std::vector<float> x = {1e-3f, -1e-3f}, w = {0, 0};
  std::vector<float> y(2, NAN);
  RmsNorm(x.data(), w.data(), y.data(), 1, 2, 2, 2, kEps, true);
  EXPECT_NEAR(y[0], 0.70710678, 1e-5);
  EXPECT_NEAR(y[1], -0.70710678, 1e-5);
}

TEST(RmsNorm, ZeroInputGivesZeroNotNan) {
  const std::vector<float> x(8, 0.0f), w(8, 0.3f);
  std::vector<float> y(8, NAN);
  RmsNorm(x.data(), w.data(), y.data(), 1, 8, 8, 8, kEps, true);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNorm, ZeroCentredWithZeroWeightIsPlainRmsNormalization) {
  const int64_t rows = 3, n = 64;
  const std::vector<float> x = Uniform(rows * n, 11, -3, 3);
  const std::vector<float> zeros(n, 0.0f), ones(n, 1.0f);
  std::vector<float> zc(rows * n, NAN), conv(rows * n, NAN);
  RmsNorm(x.data(), zeros.data(), zc.data(), rows, n, n, n, kEps, true);
  RmsNorm(x.data(), ones.data(), conv.data(), rows, n, n, n, kEps, false);
  // Plain normalization, computed here: x / sqrt(mean(x²) + eps).
  std::vector<double> plain(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += static_cast<double>(x[r * n + i]) * x[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i) plain[r * n + i] = x[r * n + i] / std::sqrt(ms + kEps);
  }
  EXPECT_TRUE(AllClose(zc, plain, 1e-6));
  for (int64_t i = 0; i < rows * n; ++i) EXPECT_EQ(zc[i], conv[i]) << i;  // (1 + 0) ≡ 1
  // And the result has unit mean square (up to eps).
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += static_cast<double>(zc[r * n + i]) * zc[r * n + i] / n;
    EXPECT_NEAR(ms, 1.0, 1e-5);
  }
}

TEST(RmsNorm, GroupedWithRowLengthWeight) {
  // The hc_norm shape: 4 streams normalized separately, weight of the full row length.
  const int64_t rows = 2, group = 16, n = 4 * group;
  std::vector<float> x = Uniform(rows * n, 12, -2, 2);
  // Make the streams' scales very different so a whole-row RMS would be visibly wrong.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] *= std::pow(10.0f, static_cast<float>(i / group) - 1);
  const std::vector<float> w = Uniform(n, 13, -0.2f, 0.2f);
  std::vector<float> y(rows * n, NAN);
  RmsNorm(x.data(), w.data(), y.data(), rows, n, group, n, kEps, true);
  EXPECT_TRUE(AllClose(y, NaiveRms(x, w, rows, n, group, true), 1e-6));
}

TEST(RmsNorm, GroupedWithGroupLengthWeightRepeatsPerGroup) {
  // The q_norm shape: [T, heads·dh] with one dh-long weight shared by the heads.
  const int64_t rows = 3, group = 8, n = 5 * group;
  const std::vector<float> x = Uniform(rows * n, 14, -1, 1);
  const std::vector<float> w = Uniform(group, 15, -0.5f, 0.5f);
  std::vector<float> y(rows * n, NAN);
  RmsNorm(x.data(), w.data(), y.data(), rows, n, group, group, kEps, true);
  EXPECT_TRUE(AllClose(y, NaiveRms(x, w, rows, n, group, true), 1e-6));
  // Conventional weight too.
  RmsNorm(x.data(), w.data(), y.data(), rows, n, group, group, kEps, false);
  EXPECT_TRUE(AllClose(y, NaiveRms(x, w, rows, n, group, false), 1e-6));
}

TEST(RmsNorm, ScaleInvariant) {
  // RMSNorm(c·x) = RMSNorm(x) for c > 0 when eps is negligible against mean(x²).
  const int64_t n = 32;
  const std::vector<float> x = Uniform(n, 16, 0.5f, 2.0f), w = Uniform(n, 17);
  std::vector<float> x8(n);
  for (int64_t i = 0; i < n; ++i) x8[i] = 8.0f * x[i];
  std::vector<float> a(n, NAN), b(n, NAN);
  RmsNorm(x.data(), w.data(), a.data(), 1, n, n, n, kEps, true);
  RmsNorm(x8.data(), w.data(), b.data(), 1, n, n, n, kEps, true);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::fabs(a[i]) + 1e-7);
}

TEST(GatedRmsNorm, HandComputed) {
  // One group of n = 2: o = (3, 4), rms = 3.5355340; w = (2, 1);
  // sigmoid gate, z = (0, ln 3): sigmoid = (0.5, 0.75)
  //   y0 = 3/3.5355340 · 2 · 0.5  = 0.8485281
  //   y1 = 4/3.5355340 · 1 · 0.75 = 0.8485281
  // silu gate, z = (0, 2): silu = (0, 2·sigmoid(2) = 1.7615942)
  //   y0 = 0;  y1 = 4/3.5355340 · 1 · 1.7615942 = 1.1313708 · 1.7615942 = 1.9930162
  const std::vector<float> o = {3, 4}, w = {2, 1};
  std::vector<float> y(2, NAN);
  const std::vector<float> z_sig = {0, std::log(3.0f)};
  GatedRmsNorm(o.data(), z_sig.data(), w.data(), y.data(), 1, 2, 2, kEps, true);
  EXPECT_NEAR(y[0], 0.8485281, 1e-6);
  EXPECT_NEAR(y[1], 0.8485281, 1e-6);
  const std::vector<float> z_silu = {0, 2};
  GatedRmsNorm(o.data(), z_silu.data(), w.data(), y.data(), 1, 2, 2, kEps, false);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 1.9930162, 2e-6);
}

TEST(GatedRmsNorm, MatchesNaivePerHead) {
  // The GDN shape: [T, Hv·dv] normalized per head of dv, one dv-long conventional weight.
  const int64_t T = 3, group = 16, n = 6 * group;
  const std::vector<float> o = Uniform(T * n, 21, -2, 2), z = Uniform(T * n, 22, -4, 4);
  const std::vector<float> w = Uniform(group, 23, 0.8f, 1.2f);
  for (bool sigmoid_gate : {true, false}) {
    std::vector<float> y(T * n, NAN);
    GatedRmsNorm(o.data(), z.data(), w.data(), y.data(), T, n, group, kEps, sigmoid_gate);
    // Conventional RMSNorm (not zero-centred) then the gate, in double.
    std::vector<double> want = NaiveRms(o, w, T, n, group, false);
    for (int64_t i = 0; i < T * n; ++i) {
      const double s = SigmoidD(z[i]);
      want[i] *= sigmoid_gate ? s : z[i] * s;
    }
    EXPECT_TRUE(AllClose(y, want, 2e-6)) << "sigmoid_gate=" << sigmoid_gate;
  }
}

TEST(GatedRmsNorm, WeightIsConventionalNotZeroCentred) {
  // The GDN norm weight is conventional: w = 0 zeroes the output (it is not 1 + w).
  const int64_t n = 8;
  const std::vector<float> o = Uniform(n, 24), z = Uniform(n, 25), w(n, 0.0f);
  std::vector<float> y(n, NAN);
  GatedRmsNorm(o.data(), z.data(), w.data(), y.data(), 1, n, n, kEps, true);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace q38::cpu
