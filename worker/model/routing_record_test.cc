// The routing record on hand-made routings: what it records, how a flip reweights, and how two
// runs' decisions are compared.
#include "worker/model/routing_record.h"

#include <cmath>

#include <gtest/gtest.h>

namespace q38 {
namespace {

// Two tokens at positions 7 and 8 of layer 2, four experts, top-2.
Routing TwoTokens() {
  Routing r;
  r.layer = 2;
  r.first_position = 7;
  r.tokens = 2;
  r.experts = 4;
  r.k = 2;
  r.logits = {1.0f, 3.0f, 2.0f, 1.9f,   // 1 and 2 chosen; 2 leads 3 by 0.1
              0.0f, 0.5f, -1.0f, 0.0f};  // 1, then 0 over 3 by id; no gap
  r.chosen = {1, 2, 1, 0};
  r.weights = {0.73f, 0.27f, 0.62f, 0.38f};
  return r;
}

TEST(RoutingRecord, RecordsRankZerosDecisionsWithTheirGaps) {
  RoutingRecorder rec;
  Routing r = TwoTokens();
  rec.Observer()(r);
  Routing other = TwoTokens();
  other.rank = 1;
  other.first_position = 20;
  rec.Observer()(other);  // another rank's copy of the same decisions: not recorded again
  const RouteDecisions d = rec.decisions();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.at({2, 7}).chosen, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(d.at({2, 7}).gap, 0.1f, 1e-6);
  EXPECT_EQ(d.at({2, 8}).chosen, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(d.at({2, 8}).gap, 0.0f);
  const auto closest = ClosestCalls(d, 1);
  ASSERT_EQ(closest.size(), 1u);
  EXPECT_EQ(closest[0].first, (RouteKey{2, 8}));
}

TEST(RoutingRecord, FlipTakesTheRunnerUpWithTheRoutersWeights) {
  Routing r = TwoTokens();
  FlipToRunnerUp(2, 7)(r);
  EXPECT_EQ(r.chosen[0], 1);
  EXPECT_EQ(r.chosen[1], 3);  // expert 3 (1.9) in place of expert 2 (2.0)
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.1)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(-1.1) / (1 + std::exp(-1.1)), 1e-6);
  EXPECT_EQ(r.chosen[2], 1);  // the other token is untouched
  EXPECT_EQ(r.chosen[3], 0);
  EXPECT_FLOAT_EQ(r.weights[2], 0.62f);
  Routing elsewhere = TwoTokens();
  FlipToRunnerUp(3, 7)(elsewhere);  // another layer
  FlipToRunnerUp(2, 9)(elsewhere);  // a position this step does not hold
  EXPECT_EQ(elsewhere.chosen, TwoTokens().chosen);
}

TEST(RoutingRecord, FollowingTakesTheReferencesExpertsWithThisRunsWeights) {
  RoutingRecorder flipped;
  Routing f = TwoTokens();
  FlipToRunnerUp(2, 7)(f);
  flipped.Observer()(f);
  Routing r = TwoTokens();
  r.logits[3] = 1.5f;  // this run's own logit for expert 3
  FollowRouting(flipped.decisions())(r);
  EXPECT_EQ(r.chosen[0], 1);  // the reference's experts, ascending
  EXPECT_EQ(r.chosen[1], 3);
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.5)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(-1.5) / (1 + std::exp(-1.5)), 1e-6);
  EXPECT_EQ(r.chosen[2], 1);  // the second token's experts were the reference's: as they were
  EXPECT_EQ(r.chosen[3], 0);
  EXPECT_FLOAT_EQ(r.weights[2], 0.62f);
  Routing elsewhere = TwoTokens();
  elsewhere.first_position = 30;  // positions the reference never decided: left alone
  FollowRouting(flipped.decisions())(elsewhere);
  EXPECT_EQ(elsewhere.chosen, TwoTokens().chosen);
  EXPECT_EQ(elsewhere.weights, TwoTokens().weights);
}

TEST(RoutingRecord, DifferencesNameTheDecisionsThatDiffer) {
  RoutingRecorder a, b;
  Routing r = TwoTokens();
  a.Observer()(r);
  EXPECT_EQ(RoutingDifferences(a.decisions(), a.decisions()), "");
  FlipToRunnerUp(2, 7)(r);
  b.Observer()(r);
  EXPECT_EQ(RoutingDifferences(b.decisions(), a.decisions()), "layer 2 position 7 (FP32 gap 1.0e-01)");
}

}  // namespace
}  // namespace q38
