// Prefill in chunks, then greedy decode: the loop the model runner and the tests share.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

struct GreedyResult {
  std::vector<int32_t> tokens;     // generated ids
  std::vector<float> first_logits;  // full-vocabulary logits after the prompt
  double prefill_seconds = 0;
  std::vector<double> step_seconds;  // one per decoded token after the first
};

// Feeds `ids` in chunks of at most `chunk` tokens, returning the logits of the last token.
absl::StatusOr<std::vector<float>> Prefill(Model& model, SequenceState& state, const std::vector<int32_t>& ids,
                                           int64_t chunk);

// The index of the largest logit; ties go to the lowest index.
int32_t Argmax(const std::vector<float>& logits);

absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                                            int64_t max_new_tokens, int64_t chunk);

}  // namespace q38
