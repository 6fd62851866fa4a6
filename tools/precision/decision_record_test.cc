// The decision record on hand-made routings and selections: what it records, how a flip
// reweights, how a run is steered onto a reference's decisions, and how two runs' decisions are
// compared.
#include "tools/precision/decision_record.h"

#include <cmath>

#include <gtest/gtest.h>

namespace q38 {
namespace {

// Two tokens at positions 7 and 8 of layer 2, four experts, top-2.
Routing TwoTokens() {
  return {.layer = 2,
          .first_position = 7,
          .tokens = 2,
          .experts = 4,
          .k = 2,
          .logits = {1.0f, 3.0f, 2.0f, 1.9f,   // 1 and 2 chosen; 2 leads 3 by 0.1
                     0.0f, 0.5f, -1.0f, 0.0f},  // 1, then 0 over 3 by id; no gap
          .chosen = {1, 2, 1, 0},
          .weights = {0.73f, 0.27f, 0.62f, 0.38f}};
}

// The same two positions of attention layer 3: three block slots each.
Selection TwoQueries() {
  return {.layer = 3, .first_position = 7, .tokens = 2, .slots = 3, .blocks = {0, 1, -1, 0, 1, -1}};
}

Decisions Recorded(const Routing& r, const Selection& s) {
  DecisionRecorder rec;
  rec.Record(r);
  rec.Record(s);
  return rec.decisions();
}

TEST(DecisionRecord, RecordsRankZerosDecisionsWithTheirGaps) {
  DecisionRecorder rec;
  rec.Record(TwoTokens());
  Routing other = TwoTokens();
  other.rank = 1;
  other.first_position = 20;
  rec.Record(other);  // another rank's copy of the same decisions: not recorded again
  rec.Record(TwoQueries());
  const Decisions d = rec.decisions();
  ASSERT_EQ(d.routes.size(), 2u);
  EXPECT_EQ(d.routes.at({2, 7}).chosen, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(d.routes.at({2, 7}).gap, 0.1f, 1e-6);
  EXPECT_EQ(d.routes.at({2, 7}).logit, 2.0f);
  EXPECT_NEAR(d.routes.at({2, 7}).gap_in_fp16_ulps(), 0.1 * 512, 1e-3);  // FP16 spacing 2⁻⁹ in [2, 4)
  EXPECT_EQ((RouteDecision{{}, 0x1p-20f, 0x1p-16f}).gap_in_fp16_ulps(), 16.0f);  // subnormal spacing 2⁻²⁴
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

TEST(DecisionRecord, HooksTakeTheReferencesDecisionsWhereTheyDiffer) {
  Routing flipped = TwoTokens();
  FlipToRunnerUp(2, 7)(flipped);
  Selection other = TwoQueries();
  other.blocks[3] = 2;  // position 8 read blocks 2 and 1
  const Decisions reference = Recorded(flipped, other);
  ModelOptions o;
  DecisionRecorder rec, own;
  InstallDecisionHooks(o, {.follow = &reference, .record = &rec, .own = &own});
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
  EXPECT_EQ(DecisionDifferences(rec.decisions(), reference), "");  // recorded after following
  // `own` holds what the run would have decided: experts 1 and 2, 2 leading 3 by 0.5 (256
  // spacings at 2), and the blocks it would have read.
  const Decisions mine = own.decisions();
  EXPECT_EQ(mine.routes.at({2, 7}).chosen, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(mine.selections.at({3, 8}), (std::vector<int32_t>{0, 1, -1}));
  EXPECT_EQ(WidestGapTakenOtherwise(rec.decisions(), mine), 256.0f);
  EXPECT_EQ(WidestGapTakenOtherwise(mine, mine), 0.0f);
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
            "experts at layer 2 position 7 (reference gap 1.0e-01, 51.2 FP16 ulps), blocks at layer 3 position 8");
}

TEST(DecisionRecord, FirstDifferenceIsTheEarliestAlongTheSequence) {
  Decisions reference;
  reference.routes[{1, 9}] = {{0, 3}, 0.3f, 1.0f};
  reference.routes[{2, 7}] = {{1, 2}, 0.1f, 1.0f};
  reference.routes[{3, 6}] = {{1, 2}, 0.5f, 1.0f};
  reference.routes[{5, 6}] = {{0, 1}, 0.02f, 1.0f};
  reference.selections[{3, 6}] = {0, 1, -1};
  Decisions got = reference;
  EXPECT_FALSE(FirstDecisionDifference(got, reference).found);
  got.routes[{1, 9}].chosen = {0, 1};
  got.routes[{2, 7}].chosen = {1, 3};
  FirstDifference f = FirstDecisionDifference(got, reference);
  EXPECT_TRUE(f.found && f.routing);
  EXPECT_EQ(f.key, (DecisionKey{2, 7}));  // position 7, though layer 1 comes first
  EXPECT_EQ(f.reference.gap, 0.1f);
  got.routes[{5, 6}].chosen = {0, 2};
  EXPECT_EQ(FirstDecisionDifference(got, reference).key, (DecisionKey{5, 6}));
  got.routes[{3, 6}].chosen = {0, 2};
  EXPECT_EQ(FirstDecisionDifference(got, reference).key, (DecisionKey{3, 6}));  // the lower layer
  got.selections[{3, 6}] = {0, 2, -1};
  f = FirstDecisionDifference(got, reference);
  EXPECT_TRUE(f.found);
  EXPECT_FALSE(f.routing);  // layer 3's attention chose its blocks before its experts
  EXPECT_EQ(f.key, (DecisionKey{3, 6}));
}

}  // namespace
}  // namespace q38
