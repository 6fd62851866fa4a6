#include "worker/model/routing_load.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace q38 {
namespace {

Routing Choices(int64_t tokens, int64_t experts, int64_t k, std::vector<int32_t> chosen) {
  Routing r;
  r.tokens = tokens;
  r.experts = experts;
  r.k = k;
  r.chosen = std::move(chosen);
  return r;
}

// Four experts, two a token: expert 0 takes every token, expert 1 three, expert 2 one, expert 3
// none.
TEST(RoutingLoad, CountsPairsAndTiles) {
  Routing r = Choices(4, 4, 2, {0, 1, 1, 0, 0, 2, 0, 1});
  r.layer = 5;
  r.first_position = 8192;
  const absl::StatusOr<ExpertLoad> summary = SummarizeRouting(r);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const ExpertLoad& load = *summary;
  EXPECT_EQ(load.layer, 5);
  EXPECT_EQ(load.first_position, 8192);
  EXPECT_EQ(load.tokens, 4);
  EXPECT_EQ(load.pairs, 8);
  EXPECT_EQ(load.idle, 1);
  EXPECT_EQ(load.median, 1);  // counts 0, 1, 3, 4: the lower middle one
  EXPECT_EQ(load.most, 4);
  ASSERT_EQ(load.tiles.size(), std::size(kLoadTileRows));
  for (size_t i = 0; i < load.tiles.size(); ++i) {
    EXPECT_EQ(load.tiles[i], 3) << kLoadTileRows[i];  // one tile for each expert with a pair
    EXPECT_DOUBLE_EQ(load.filled[i], 8.0 / (3.0 * kLoadTileRows[i])) << kLoadTileRows[i];
  }
}

// An expert with more pairs than a tile holds takes several, the last one partial.
TEST(RoutingLoad, BusyExpertTakesSeveralTiles) {
  const Routing r = Choices(200, 2, 1, std::vector<int32_t>(200, 1));
  const absl::StatusOr<ExpertLoad> summary = SummarizeRouting(r);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const ExpertLoad& load = *summary;
  EXPECT_EQ(load.idle, 1);
  EXPECT_EQ(load.most, 200);
  EXPECT_EQ(load.tiles, (std::vector<int64_t>{4, 2, 2, 1}));
}

TEST(RoutingLoad, RefusesChoicesOutsideTheRouter) {
  absl::StatusOr<ExpertLoad> load = SummarizeRouting(Choices(1, 2, 1, {2}));
  EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(load.status().message(), "routing: expert 2 of 2");
  load = SummarizeRouting(Choices(1, 2, 1, {1, 0}));
  EXPECT_EQ(load.status().message(), "routing: 2 choices for 1 tokens of 1 over 2 experts");
}

}  // namespace
}  // namespace q38
