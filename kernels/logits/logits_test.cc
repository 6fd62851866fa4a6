// ArgMax (kernels/logits) by hand and against the greedy rule written out: the largest value,
// ties to the lowest index, NaN never wins, nothing above −inf gives (−inf, −1). TopLogits and
// its merge over ranks against a full sort and a log-softmax in double.
#include "kernels/logits/logits.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

std::pair<float, float> Best(const std::vector<float>& x, int64_t valid) {
  float out[2] = {NAN, NAN};
  ArgMax(x.data(), valid, out);
  return {out[0], out[1]};
}

TEST(ArgMax, ByHand) {
  EXPECT_EQ(Best({1, 3, 2, 3}, 4), std::make_pair(3.0f, 1.0f));  // tie: the lower index
  EXPECT_EQ(Best({1, 3, 2, 3}, 1), std::make_pair(1.0f, 0.0f));  // the bound hides the rest
  EXPECT_EQ(Best({NAN, -2, NAN, -1}, 4), std::make_pair(-1.0f, 3.0f));
  EXPECT_EQ(Best({-INFINITY, 5, INFINITY, INFINITY}, 4), std::make_pair(INFINITY, 2.0f));
  EXPECT_EQ(Best({-INFINITY, NAN}, 2), std::make_pair(-INFINITY, -1.0f));
  EXPECT_EQ(Best({7}, 0), std::make_pair(-INFINITY, -1.0f));
}

TEST(ArgMax, MatchesTheRuleOnRandomRowsWithManyTies) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::vector<float> x = op_test::Uniform(5000, seed, -4, 4);
    for (float& v : x) v = std::round(v * 2) / 2;  // 17 distinct values: ties everywhere
    if (seed % 3 == 0) x[seed * 7] = NAN;
    if (seed % 4 == 0) x[seed * 11] = -INFINITY;
    for (int64_t valid : {int64_t{5000}, int64_t{4999}, int64_t{123}, int64_t{1}}) {
      float best = -INFINITY;
      int64_t id = -1;
      for (int64_t i = 0; i < valid; ++i) {
        if (!std::isnan(x[i]) && x[i] != -INFINITY && (id < 0 || x[i] > best)) best = x[i], id = i;
      }
      EXPECT_EQ(Best(x, valid), std::make_pair(best, static_cast<float>(id))) << seed << " " << valid;
    }
  }
}

std::vector<float> Top(const std::vector<float>& x, int64_t valid, int64_t k) {
  std::vector<float> out(2 * k + 2, NAN);
  TopLogits(x.data(), valid, k, out.data());
  return out;
}

TEST(TopLogits, ByHand) {
  const float inf = INFINITY;
  // Ties go to the lower index; NaN and −inf are never taken; empty slots are (−inf, −1).
  const std::vector<float> t = Top({1, 3, NAN, 3, -inf, 2}, 6, 3);
  EXPECT_EQ(std::vector<float>(t.begin(), t.begin() + 7), (std::vector<float>{3, 3, 2, 1, 3, 5, 3}));
  EXPECT_NEAR(t[7], 2 + std::exp(-1.0) + std::exp(-2.0), 1e-6);  // 1 and 2 below the max of 3
  EXPECT_EQ(Top({NAN, -inf}, 2, 2), (std::vector<float>{-inf, -inf, -1, -1, -inf, 0}));
  EXPECT_EQ(Top({5, 4}, 1, 2), (std::vector<float>{5, -inf, 0, -1, 5, 1}));  // the bound hides index 1
  // +inf: the limit, where each +inf counts 1 and the finite values 0.
  EXPECT_EQ(Top({inf, 7, inf}, 3, 1), (std::vector<float>{inf, 0, inf, 2}));
}

// Against a full sort of (value desc, index asc) and a double log-sum-exp, on rows with ties,
// split over 1–4 ranks and merged: the same ids and logits as over the whole row.
TEST(TopLogits, MergedOverRanksEqualsTheWholeRow) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const int64_t V = 4000;
    std::vector<float> x = op_test::Uniform(V, seed, -6, 6);
    if (seed % 2 == 0) {
      for (float& v : x) v = std::round(v * 4) / 4;  // ties across ranks too
    }
    if (seed % 3 == 0) x[seed * 13] = NAN;
    for (int64_t valid : {V, V - 333, int64_t{17}}) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < valid; ++i)
        if (!std::isnan(x[i])) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
      double m = -INFINITY, s = 0;
      for (int64_t i : order) m = std::max<double>(m, x[i]);
      for (int64_t i : order) s += std::exp(x[i] - m);
      const double lse = m + std::log(s);
      for (int64_t world : {1, 2, 4}) {
        for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{20}}) {
          const int64_t shard = V / world;
          std::vector<float> parts(world * (2 * k + 2));
          for (int64_t r = 0; r < world; ++r) {
            const int64_t local = std::clamp<int64_t>(valid - r * shard, 0, shard);
            TopLogits(x.data() + r * shard, local, k, parts.data() + r * (2 * k + 2));
          }
          const LogitsSummary got = MergeTopLogits(parts.data(), world, k, shard);
          ASSERT_EQ(got.top.size(), std::min<size_t>(k, order.size()));
          for (size_t j = 0; j < got.top.size(); ++j) {
            EXPECT_EQ(got.top[j].first, order[j]) << seed << " " << valid << " " << world << " " << k << " " << j;
            EXPECT_EQ(got.top[j].second, x[order[j]]);
          }
          EXPECT_NEAR(got.log_sum_exp, lse, 1e-6) << seed << " " << valid << " " << world;
        }
      }
    }
  }
}

}  // namespace
}  // namespace q38::cpu
