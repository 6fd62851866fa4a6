// Tests of partial NeoX RoPE (docs/model.md §8.1): the §15 reference frequencies, hand rotations,
// and the invariants of a rotation (norm preservation, composition, pass-through dims).
#include "kernels/rope/rope.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;

constexpr double kTheta = 1e7;   // rope_theta
constexpr int64_t kRd = 64;      // rotary dims (partial_rotary_factor 0.25 of 256)
constexpr int64_t kDh = 256;     // head_dim

TEST(Rope, ReferenceFrequenciesOfModelMd17) {
  // θ_i = 1e7^(−i/32): θ₀ = 1, θ₁ = 0.60430, θ₃₁ = 1.6548e-7 (docs/model.md §15, 5 digits).
  EXPECT_EQ(RopeInvFreq(0, kRd, kTheta), 1.0f);
  EXPECT_NEAR(RopeInvFreq(1, kRd, kTheta), 0.60430, 0.5e-5);
  EXPECT_NEAR(RopeInvFreq(31, kRd, kTheta), 1.6548e-7, 0.5e-11);
  // Every frequency against the closed form in double, to FP32 accuracy.
  for (int64_t i = 0; i < kRd / 2; ++i) {
    const double want = std::pow(kTheta, -static_cast<double>(i) / 32.0);
    EXPECT_NEAR(RopeInvFreq(i, kRd, kTheta), want, 1e-6 * want) << i;
  }
}

TEST(Rope, HandRotationSmallHead) {
  // head_dim = rotary_dim = 4, theta = 1e4: θ₀ = 1, θ₁ = 1e4^(−2/4) = 0.01; pairs (0,2), (1,3).
  // x = (1, 0, 0, 2) at p = 1:
  //   pair (0,2): (1, 0) rotated by 1 rad    → (cos 1, sin 1) = (0.5403023, 0.8414710)
  //   pair (1,3): (0, 2) rotated by 0.01 rad → (−2 sin .01, 2 cos .01) = (−0.0199997, 1.9999000)
  std::vector<float> x = {1, 0, 0, 2};
  const int64_t pos = 1;
  Rope(x.data(), &pos, 1, 1, 4, 4, 1e4);
  EXPECT_NEAR(x[0], 0.5403023, 1e-6);
  EXPECT_NEAR(x[2], 0.8414710, 1e-6);
  EXPECT_NEAR(x[1], -0.0199997, 1e-6);
  EXPECT_NEAR(x[3], 1.9999000, 1e-6);
}

TEST(Rope, NeoxHalfSplitPairing) {
  // A unit vector on dim 5 rotates into dim 5 + 32 (not dim 6, as interleaved pairing would).
  // p = 3, θ₅ = 1e7^(−5/32): x'5 = cos(3θ₅), x'37 = sin(3θ₅), all else 0.
  std::vector<float> x(kDh, 0.0f);
  x[5] = 1.0f;
  const int64_t pos = 3;
  Rope(x.data(), &pos, 1, 1, kDh, kRd, kTheta);
  const double angle = 3.0 * std::pow(kTheta, -5.0 / 32.0);
  for (int64_t c = 0; c < kDh; ++c) {
    const double want = c == 5 ? std::cos(angle) : c == 37 ? std::sin(angle) : 0.0;
    EXPECT_NEAR(x[c], want, 1e-6) << c;
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  std::vector<float> x = Uniform(2 * 3 * kDh, 1);
  const std::vector<float> before = x;
  const int64_t pos[2] = {0, 0};
  Rope(x.data(), pos, 2, 3, kDh, kRd, kTheta);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], before[i]) << i;
}

TEST(Rope, MatchesNaiveRotationPerTokenAndHead) {
  // T = 3 tokens at different positions, 4 heads: each token rotated at its own position,
  // every head alike, dims [64, 256) untouched. The naive version pairs (i, i+32) explicitly.
  const int64_t T = 3, heads = 4;
  const int64_t pos[T] = {0, 17, 99};
  std::vector<float> x = Uniform(T * heads * kDh, 2, -2, 2);
  const std::vector<float> in = x;
  Rope(x.data(), pos, T, heads, kDh, kRd, kTheta);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = in.data() + (t * heads + h) * kDh;
      const float* b = x.data() + (t * heads + h) * kDh;
      for (int64_t i = 0; i < 32; ++i) {
        // The reference's angle is an FP32 product of the position and the FP32 frequency.
        const float freq = static_cast<float>(std::pow(kTheta, -static_cast<double>(i) / 32.0));
        const double phi = static_cast<float>(pos[t]) * freq;
        const double c = std::cos(phi), s = std::sin(phi);
        EXPECT_NEAR(b[i], a[i] * c - a[i + 32] * s, 1e-5) << t << " " << h << " " << i;
        EXPECT_NEAR(b[i + 32], a[i + 32] * c + a[i] * s, 1e-5) << t << " " << h << " " << i;
      }
      for (int64_t c = kRd; c < kDh; ++c) EXPECT_EQ(b[c], a[c]) << c;
    }
  }
}

TEST(Rope, PreservesPairNorms) {
  const int64_t T = 4, heads = 2;
  const int64_t pos[T] = {1, 1000, 65537, 262143};
  std::vector<float> x = Uniform(T * heads * kDh, 3, -3, 3);
  const std::vector<float> in = x;
  Rope(x.data(), pos, T, heads, kDh, kRd, kTheta);
  for (int64_t r = 0; r < T * heads; ++r) {
    for (int64_t i = 0; i < 32; ++i) {
      const float* a = in.data() + r * kDh;
      const float* b = x.data() + r * kDh;
      const double n0 = std::hypot(static_cast<double>(a[i]), a[i + 32]);
      const double n1 = std::hypot(static_cast<double>(b[i]), b[i + 32]);
      EXPECT_NEAR(n1, n0, 1e-5 * n0 + 1e-7) << r << " " << i;
    }
  }
}

TEST(Rope, RotationsCompose) {
  // Rotating by p then by q equals rotating by p + q (positions small enough that the FP32
  // angle products are exact to ~1e-7 rad).
  const int64_t heads = 2;
  const std::pair<int64_t, int64_t> cases[] = {{3, 5}, {100, 250}, {1, 1}, {0, 7}};
  for (const auto& [p, q] : cases) {
    std::vector<float> twice = Uniform(heads * kDh, 4), once = twice;
    Rope(twice.data(), &p, 1, heads, kDh, kRd, kTheta);
    Rope(twice.data(), &q, 1, heads, kDh, kRd, kTheta);
    const int64_t pq = p + q;
    Rope(once.data(), &pq, 1, heads, kDh, kRd, kTheta);
    for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], once[i], 1e-5) << p << "+" << q << " " << i;
  }
}

TEST(Rope, LargestPositionUsesAccurateAngle) {
  // p = 262143 (max_position_embeddings − 1): the fastest pair (θ₀ = 1) turns by exactly
  // 262143 rad (an integer, exact in FP32): cos = −0.6091615, sin = 0.7930462.
  std::vector<float> x(kDh, 0.0f);
  x[0] = 1.0f;
  const int64_t pos = 262143;
  Rope(x.data(), &pos, 1, 1, kDh, kRd, kTheta);
  EXPECT_NEAR(x[0], -0.6091615, 1e-6);
  EXPECT_NEAR(x[32], 0.7930462, 1e-6);
}

}  // namespace
}  // namespace q38::cpu
