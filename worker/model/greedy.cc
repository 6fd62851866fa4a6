#include "worker/model/greedy.h"

#include <algorithm>
#include <chrono>

#include "common/status.h"

namespace q38 {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

absl::StatusOr<std::vector<float>> Prefill(Model& model, SequenceState& state, const std::vector<int32_t>& ids,
                                           int64_t chunk) {
  if (ids.empty()) return absl::InvalidArgumentError("prefill: empty prompt");
  if (chunk <= 0) return absl::InvalidArgumentError("prefill: chunk must be positive");
  Buffer logits;
  for (size_t begin = 0; begin < ids.size(); begin += chunk) {
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(chunk));
    ASSIGN_OR_RETURN(logits, model.Forward(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), state));
  }
  return model.GatherLogits(logits);
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, SequenceState& state, const std::vector<int32_t>& prompt,
                                            int64_t max_new_tokens, int64_t chunk) {
  GreedyResult r;
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(r.first_logits, Prefill(model, state, prompt, chunk));
  r.prefill_seconds = Seconds(start);
  if (max_new_tokens <= 0) return r;
  r.tokens.push_back(Argmax(r.first_logits));
  while (static_cast<int64_t>(r.tokens.size()) < max_new_tokens) {
    start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(Buffer local, model.Forward({r.tokens.back()}, state));
    // Every id is valid here, as for Argmax over first_logits.
    ASSIGN_OR_RETURN(int32_t token, model.GreedyToken(local, local.t().dim(1) * model.comm().size()));
    r.tokens.push_back(token);
    r.step_seconds.push_back(Seconds(start));
  }
  return r;
}

}  // namespace q38
