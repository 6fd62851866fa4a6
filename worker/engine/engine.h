// One rank's generation loop. Every rank runs the same request in lockstep through its
// communicator; rank 0 decides each token (sampling, stop, cancel) and broadcasts the decision
// in-band, so no rank can run a step more than another (docs/design.md §1).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
};

struct RunResult {
  std::string finish_reason;  // eos, stop, length, cancelled
  int32_t generated = 0;
  double prefill_seconds = 0;
};

class Engine {
 public:
  Engine(Model& model, int64_t max_context, int64_t valid_vocab);

  // Runs `spec` to completion. On rank 0, `emit` receives each token as soon as it is decided and
  // `cancelled` is polled once per decode step and after each block (mixer, MoE) of prefill, so a
  // cancel stops a long prompt within a block; on other ranks both are ignored. A collective failure (a dead peer,
  // a timeout) returns its status.
  absl::StatusOr<RunResult> Run(const RunSpec& spec, const std::function<void(int32_t)>& emit,
                                const std::function<bool()>& cancelled);

  int64_t max_context() const { return max_context_; }
  // Counts prefill blocks and decode steps as they finish: a watchdog that sees it stand still
  // knows the rank is stuck, however long the prompt.
  uint64_t progress() const { return progress_.load(std::memory_order_relaxed); }

 private:
  Model& model_;
  int64_t max_context_;
  int64_t valid_vocab_;
  SequenceState state_;
  std::atomic<uint64_t> progress_{0};
};

}  // namespace q38
