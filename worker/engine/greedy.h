// Greedy generation through the engine's own loop (Engine::Run at temperature 0): the tokens the
// model runner, the benchmark and the tests compare the server against, with their timings.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"

namespace q38 {

struct GreedyResult {
  std::vector<int32_t> tokens;       // generated ids (rank 0; empty on the other ranks)
  double prefill_seconds = 0;
  std::vector<double> prefill_chunk_seconds;  // with time_chunks: each prefill chunk's (every rank)
  std::vector<double> step_seconds;  // one per decoded token after the first (rank 0)
};

// Prefills `prompt` in chunks of `chunk` tokens and decodes `max_new_tokens` greedily on every
// rank of the engine's group (a collective: every rank calls it). With `time_chunks`, each
// prefill chunk is synchronized and timed (RunSpec::time_prefill_chunks).
absl::StatusOr<GreedyResult> GenerateGreedy(Engine& engine, const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                            int64_t chunk, bool time_chunks = false);

// The same on an engine sized for exactly this request.
absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                            int64_t chunk);

}  // namespace q38
