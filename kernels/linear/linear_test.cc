// Tests of the dense linear reference y = x·Wᵀ against hand arithmetic and an independent
// re-implementation (different loop order, explicit transposed weight).
#include "kernels/linear/linear.h"

#include <array>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;

TEST(Linear, HandComputed) {
  // x [2,3], W [2,3] ([out, in]):
  //   x0 = ( 1,  2,  3)   W0 = (1, 0, -1)   W1 = (0.5, 0.25, 2)
  //   x1 = (-1, 0.5, 4)
  //   y00 = 1 - 3 = -2;         y01 = 0.5 + 0.5 + 6 = 7
  //   y10 = -1 - 4 = -5;        y11 = -0.5 + 0.125 + 8 = 7.625
  const std::vector<float> x = {1, 2, 3, -1, 0.5f, 4};
  const std::vector<float> w = {1, 0, -1, 0.5f, 0.25f, 2};
  std::vector<float> y(4, NAN);
  Linear(x.data(), w.data(), y.data(), 2, 3, 2);
  // Every operand and partial sum is a short dyadic fraction: the result is exact.
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[2], -5.0f);
  EXPECT_EQ(y[3], 7.625f);
}

TEST(Linear, MatchesTransposedNaiveProduct) {
  const int64_t T = 3, K = 257, N = 7;
  const std::vector<float> x = Uniform(T * K, 1), w = Uniform(N * K, 2);
  // Independent product: transpose W to [K, N] and accumulate column-wise, k outermost.
  std::vector<double> wt(K * N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) wt[k * N + n] = w[n * K + k];
  std::vector<double> want(T * N, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) want[t * N + n] += static_cast<double>(x[t * K + k]) * wt[k * N + n];

  std::vector<float> y(T * N, NAN);
  Linear(x.data(), w.data(), y.data(), T, K, N);
  for (int64_t i = 0; i < T * N; ++i) {
    ASSERT_FALSE(std::isnan(y[i])) << i;
    // Both accumulate in double; the only rounding is the final cast to float.
    EXPECT_NEAR(y[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << i;
  }
}

TEST(Linear, AccumulatesWithoutCancellationLoss) {
  // x = (1, 1, 1), W0 = (1e8, 1, -1e8): a float accumulator loses the 1 (1e8 + 1 rounds to
  // 1e8); the header promises double accumulation, so the answer is exactly 1.
  const std::vector<float> x = {1, 1, 1};
  const std::vector<float> w = {1e8f, 1, -1e8f};
  float y = NAN;
  Linear(x.data(), w.data(), &y, 1, 3, 1);
  EXPECT_EQ(y, 1.0f);
}

TEST(Linear, WritesEveryOutputAndOnlyThem) {
  const int64_t T = 4, K = 16, N = 5;
  const std::vector<float> x = Uniform(T * K, 3), w = Uniform(N * K, 4);
  std::vector<float> y(T * N + 3, NAN);
  y[T * N] = y[T * N + 1] = y[T * N + 2] = 123.0f;  // guard past the end
  Linear(x.data(), w.data(), y.data(), T, K, N);
  for (int64_t i = 0; i < T * N; ++i) EXPECT_FALSE(std::isnan(y[i])) << i;
  for (int64_t i = T * N; i < T * N + 3; ++i) EXPECT_EQ(y[i], 123.0f);
}

TEST(Linear, RowsAreIndependent) {
  // Running T rows at once equals running each row alone (prefill GEMM = stacked decode GEMVs).
  const int64_t T = 5, K = 33, N = 9;
  const std::vector<float> x = Uniform(T * K, 5), w = Uniform(N * K, 6);
  std::vector<float> all(T * N, NAN), one(N, NAN);
  Linear(x.data(), w.data(), all.data(), T, K, N);
  for (int64_t t = 0; t < T; ++t) {
    Linear(x.data() + t * K, w.data(), one.data(), 1, K, N);
    for (int64_t n = 0; n < N; ++n) EXPECT_EQ(all[t * N + n], one[n]);
  }
}

}  // namespace
}  // namespace q38::cpu

namespace q38::cpu {
namespace {

// The fast path against the reference: shapes with and without a lane tail and a row tail,
// decode (T = 1) and prefill, and a column range of a wider output left as it was outside.
TEST(LinearFast, MatchesTheReferenceWithinFp32Rounding) {
  for (const auto& [T, K, N] : std::vector<std::array<int64_t, 3>>{{1, 256, 7}, {1, 33, 4}, {5, 257, 13}, {3, 16, 1}, {2, 5, 3}}) {
    const std::vector<float> x = op_test::Uniform(T * K, 11), w = op_test::Uniform(N * K, 12);
    std::vector<float> want(T * N), got(T * (N + 2), -7.0f);
    Linear(x.data(), w.data(), want.data(), T, K, N);
    LinearFast(x.data(), w.data(), got.data() + 1, T, K, N, N + 2);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(got[t * (N + 2)], -7.0f);
      EXPECT_EQ(got[t * (N + 2) + N + 1], -7.0f);
      for (int64_t n = 0; n < N; ++n) {
        // Each partial sum rounds once more than in double: K roundings of at most ½ ulp of Σ|x·w|.
        double bound = 0;
        for (int64_t k = 0; k < K; ++k) bound += std::fabs(double{x[t * K + k]} * w[n * K + k]);
        EXPECT_NEAR(got[t * (N + 2) + 1 + n], want[t * N + n], 1e-7 * K * bound + 1e-30) << T << "×" << K << "×" << N;
      }
    }
  }
}

TEST(LinearFast, ExactWhereEveryPartialSumIsExact) {
  // Small integers: every product and sum is exact in FP32, in any order.
  const int64_t T = 2, K = 37, N = 6;
  std::vector<float> x(T * K), w(N * K);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  std::vector<float> want(T * N), got(T * N);
  Linear(x.data(), w.data(), want.data(), T, K, N);
  LinearFast(x.data(), w.data(), got.data(), T, K, N, N);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace q38::cpu
