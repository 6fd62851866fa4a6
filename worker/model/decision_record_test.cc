// The decision record on hand-made routings and selections: what it records, how a flip
// reweights, how a run is steered onto a reference's decisions, and how two runs' decisions are
// compared.
#include "worker/model/decision_record.h"

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

// The same two positions of attention layer 3: three block slots each.
Selection TwoQueries() {
  Selection s;
  s.layer = 3;
  s.first_position = 7;
  s.tokens = 2;
  s.slots = 3;
  s.blocks = {0, 1, -1, 0, 1, -1};
  return s;
}

Decisions Recorded(Routing r, Selection s) {
  DecisionRecorder rec;
  ModelOptions o;
  Steer(o, nullptr, &rec);
  o.routing(r);
  o.selection(s);
  return rec.decisions();
}

TEST(DecisionRecord, RecordsRankZerosDecisionsWithTheirGaps) {
  DecisionRecorder rec;
  ModelOptions o;
  Steer(o, nullptr, &rec);
  Routing r = TwoTokens();
  o.routing(r);
  Routing other = TwoTokens();
  other.rank = 1;
  other.first_position = 20;
  o.routing(other);  // another rank's copy of the same decisions: not recorded again
  Selection s = TwoQueries();
  o.selection(s);
  const Decisions d = rec.decisions();
  ASSERT_EQ(d.routes.size(), 2u);
  EXPECT_EQ(d.routes.at({2, 7}).chosen, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(d.routes.at({2, 7}).gap, 0.1f, 1e-6);
  EXPECT_EQ(d.routes.at({2, 8}).chosen, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(d.routes.at({2, 8}).gap, 0.0f);
  EXPECT_EQ(d.selections.at({3, 8}), (std::vector<int32_t>{0, 1, -1}));
  const auto closest = ClosestCalls(d, 1);
  ASSERT_EQ(closest.size(), 1u);
  EXPECT_EQ(closest[0].first, (DecisionKey{2, 8}));
}

TEST(DecisionRecord, FlipTakesTheRunnerUpWithTheRoutersWeights) {
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

TEST(DecisionRecord, SteeringTakesTheReferencesDecisionsWhereTheyDiffer) {
  Routing flipped = TwoTokens();
  FlipToRunnerUp(2, 7)(flipped);
  Selection other = TwoQueries();
  other.blocks[3] = 2;  // position 8 read blocks 2 and 1
  const Decisions reference = Recorded(flipped, other);
  ModelOptions o;
  DecisionRecorder rec;
  Steer(o, &reference, &rec);
  Routing r = TwoTokens();
  r.logits[3] = 1.5f;  // this run's own logit for expert 3
  o.routing(r);
  EXPECT_EQ(r.chosen[0], 1);  // the reference's experts, ascending, with this run's weights
  EXPECT_EQ(r.chosen[1], 3);
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.5)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(-1.5) / (1 + std::exp(-1.5)), 1e-6);
  EXPECT_EQ(r.chosen[2], 1);  // the second token's experts were the reference's: as they were
  EXPECT_EQ(r.chosen[3], 0);
  EXPECT_FLOAT_EQ(r.weights[2], 0.62f);
  Selection s = TwoQueries();
  o.selection(s);
  EXPECT_EQ(s.blocks, other.blocks);
  EXPECT_EQ(DecisionDifferences(rec.decisions(), reference), "");  // it recorded what it took
  Routing elsewhere = TwoTokens();
  elsewhere.first_position = 30;  // positions the reference never decided: left alone
  o.routing(elsewhere);
  EXPECT_EQ(elsewhere.chosen, TwoTokens().chosen);
  EXPECT_EQ(elsewhere.weights, TwoTokens().weights);
}

TEST(DecisionRecord, DifferencesNameTheDecisionsThatDiffer) {
  const Decisions plain = Recorded(TwoTokens(), TwoQueries());
  EXPECT_EQ(DecisionDifferences(plain, plain), "");
  Routing flipped = TwoTokens();
  FlipToRunnerUp(2, 7)(flipped);
  Selection other = TwoQueries();
  other.blocks[3] = 2;
  EXPECT_EQ(DecisionDifferences(Recorded(flipped, other), plain),
            "experts at layer 2 position 7 (FP32 gap 1.0e-01), blocks at layer 3 position 8");
}

}  // namespace
}  // namespace q38
