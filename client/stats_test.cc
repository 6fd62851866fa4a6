#include "client/stats.h"

#include <numeric>

#include "gtest/gtest.h"

namespace q38::client {
namespace {

TEST(Stats, PercentileInterpolatesBetweenClosestRanks) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);  // 1..100
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 90.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99.01);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(Percentile(v, 150), 100);  // clamped
  EXPECT_DOUBLE_EQ(Percentile(v, -5), 1);
}

TEST(Stats, PercentileSortsItsInput) {
  EXPECT_DOUBLE_EQ(Percentile({5, 1, 3}, 50), 3);
  EXPECT_DOUBLE_EQ(Percentile({4, 1}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
}

TEST(Stats, Summarize) {
  Summary s = Summarize({3, 1, 2, 10});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.p90, 3 + 0.7 * 7);  // rank 2.7 between 3 and 10
  EXPECT_DOUBLE_EQ(s.p99, 3 + 0.97 * 7);

  Summary empty = Summarize({});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.mean, 0);
  EXPECT_EQ(empty.p99, 0);
}

}  // namespace
}  // namespace q38::client
