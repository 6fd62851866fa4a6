// ArgMax (kernels/logits) by hand and against the greedy rule written out: the largest value,
// ties to the lowest index, NaN never wins, nothing above −inf gives (−inf, −1).
#include "kernels/logits/logits.h"

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

}  // namespace
}  // namespace q38::cpu
