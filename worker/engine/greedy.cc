#include "worker/engine/greedy.h"

#include <chrono>

#include "common/status.h"

namespace q38 {

absl::StatusOr<GreedyResult> GenerateGreedy(Engine& engine, const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                            int64_t chunk, bool time_chunks) {
  if (chunk <= 0) return absl::InvalidArgumentError("greedy: chunk must be positive");
  RunSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = max_new_tokens;
  spec.prefill_chunk = chunk;
  spec.time_prefill_chunks = time_chunks;
  GreedyResult r;
  std::chrono::steady_clock::time_point last;
  const Engine::Emit emit = [&](int32_t token, const std::optional<TokenLogprobs>&) {
    const auto now = std::chrono::steady_clock::now();
    if (!r.tokens.empty()) r.step_seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
    r.tokens.push_back(token);
  };
  ASSIGN_OR_RETURN(RunResult run, engine.Run(spec, emit, [] { return false; }));
  r.prefill_seconds = run.prefill_seconds;
  r.prefill_chunk_seconds = std::move(run.prefill_chunk_seconds);
  return r;
}

absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                            int64_t chunk) {
  Engine engine(model, static_cast<int64_t>(prompt.size()) + max_new_tokens, model.config().vocab_size);
  return GenerateGreedy(engine, prompt, max_new_tokens, chunk);
}

}  // namespace q38
