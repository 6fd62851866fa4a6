// How a step's router spreads its tokens over the experts (from ModelOptions::routing): what the
// grouped expert GEMM of prefill is given. Kernel benches route evenly; this says how even the
// model's own routing is, and so which tile height suits it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

// The tile heights the summary counts tiles for: the grouped route's 64 and 128 rows, and taller
// ones it might take.
inline constexpr int64_t kLoadTileRows[] = {64, 128, 192, 256};

struct ExpertLoad {
  int layer = 0;
  int64_t first_position = 0, tokens = 0, pairs = 0;
  int64_t idle = 0;    // experts without a pair
  int64_t median = 0;  // the pairs of the median expert (the lower of the two middle ones)
  int64_t most = 0;    // the pairs of the busiest expert
  // Per height of kLoadTileRows: the tiles the route runs (Σ_e ⌈pairs_e / rows⌉) and the share of
  // their rows that hold a pair.
  std::vector<int64_t> tiles;
  std::vector<double> filled;
};

// InvalidArgument where chosen is not [tokens, k] or names an expert outside [0, experts).
absl::StatusOr<ExpertLoad> SummarizeRouting(const Routing& r);

}  // namespace q38
