// One rank's generation loop. Every rank runs the same request in lockstep through its
// communicator; rank 0 decides each token (sampling, stop, cancel) and broadcasts the decision
// in-band, so no rank can run a step more than another (docs/design.md §1).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "q38/v1/q38.pb.h"
#include "worker/model/qwen4_exp.h"
#include "worker/sampling/sampler.h"

namespace q38 {

struct RunSpec {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 1;
  std::set<int32_t> stop_ids;  // generation ends after emitting one of these
  std::set<int32_t> eos_ids;   // which stop ids count as "eos" rather than "stop"
  int64_t prefill_chunk = 8192;
  // Synchronize the device after each prefill chunk and time it (benchmarks: how a long prompt's
  // cost grows along it); off, chunks are enqueued back to back.
  bool time_prefill_chunks = false;
  // −1: none; 0–20: each token's log probability and this many alternatives (docs/api.md).
  int32_t logprobs = -1;
};

// A generated token's log-softmax under the step's raw logits (before temperature, top-k and
// top-p) over the valid vocabulary, and the `logprobs` most likely ids, by logit, ties to the
// lower id.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob)
};

struct RunResult {
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;  // EOS, STOP, LENGTH or CANCELLED
  int32_t generated = 0;
  double prefill_seconds = 0;  // the prompt to its first token decided (time to first token)
  std::vector<double> prefill_chunk_seconds;  // with RunSpec::time_prefill_chunks: each chunk's
};

class Engine {
 public:
  Engine(Model& model, int64_t max_context, int64_t valid_vocab);

  using Emit = std::function<void(int32_t token, const std::optional<TokenLogprobs>& logprobs)>;
  // Runs `spec` to completion. On rank 0, `emit` receives each token (with its log probabilities
  // when spec.logprobs ≥ 0) as soon as it is decided and
  // `cancelled` is polled once per decode step and after each block (mixer, MoE) of prefill, so a
  // cancel stops a long prompt within a block; on other ranks both are ignored. A collective failure (a dead peer,
  // a timeout) returns its status.
  absl::StatusOr<RunResult> Run(const RunSpec& spec, const Emit& emit, const std::function<bool()>& cancelled);

  int64_t max_context() const { return max_context_; }
  // Counts prefill blocks and decode steps as they finish: a watchdog that sees it stand still
  // knows the rank is stuck, however long the prompt.
  uint64_t progress() const { return progress_.load(std::memory_order_relaxed); }

 private:
  Model& model_;
  // Decides the step's token from rank-local logits (every rank calls it: it may gather); on rank 0
  // also its log probabilities when asked.
  absl::StatusOr<int32_t> Decide(const Buffer& local, const RunSpec& spec, uint64_t step,
                                 std::optional<TokenLogprobs>& logprobs);

  int64_t max_context_;
  int64_t valid_vocab_;
  SequenceState state_;
  std::atomic<uint64_t> progress_{0};
};

}  // namespace q38
