// One generation request's lifecycle, shared by both front doors (the gRPC Generate, the HTTP
// completions): validation, the prompt's ids (token ids, text, or chat through the model's
// template), admission into the scheduler, then tokens, text and log probabilities relayed until
// the job ends, stop strings applied, cancels honoured, and every metric counted once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "q38/v1/q38.pb.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/service_info.h"
#include "server/text_stream.h"

namespace q38 {

// An admitted request. Relay runs it to its end; dropped before that, it is cancelled (a client
// that left before its first byte).
class Generation {
 public:
  // Each message to the client: false when the client is gone (the job is cancelled).
  using Write = std::function<bool(const v1::GenerateResponse&)>;
  // Asked after each wake-up (tokens, the end, Wake, or `poll` passing): why to cancel, or
  // CANCEL_REASON_UNSPECIFIED to go on.
  using Cancelled = std::function<worker::v1::CancelReason()>;

  Generation(Scheduler& scheduler, Metrics& metrics, const Tokenizer* tokenizer, std::vector<std::string> stop,
             std::shared_ptr<Job> job);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Streams the tokens (their text when the model has a tokenizer, never half a UTF-8 character;
  // their log probabilities when asked) and, when the job finishes, a last message with the
  // finish reason, usage and timings. A cancel ends it with CANCELLED (client, drain) or
  // DEADLINE_EXCEEDED; a failed group with its UNAVAILABLE or INTERNAL.
  // A front door whose cancels arrive as events (gRPC's OnCancel) calls Wake and waits without a
  // `poll`; one that must look (an HTTP peer's socket) gives how often.
  absl::Status Relay(const Write& write, const Cancelled& cancelled,
                     std::optional<std::chrono::milliseconds> poll = std::nullopt);
  // Makes Relay ask `cancelled` now; any thread may call it.
  void Wake();

  int32_t prompt_tokens() const { return static_cast<int32_t>(job_->prompt.size()); }

 private:
  Scheduler& scheduler_;
  Metrics& metrics_;
  std::optional<TextStream> text_;
  std::shared_ptr<Job> job_;
  bool relayed_ = false;
  bool woken_ = false;  // guarded by job_->mu
};

class Generations {
 public:
  Generations(Scheduler& scheduler, Metrics& metrics, const ServiceInfo& info)
      : scheduler_(scheduler), metrics_(metrics), info_(info) {}

  // Validates and admits `req`, counting a refusal in the metrics: INVALID_ARGUMENT naming the
  // field, FAILED_PRECONDITION (text without a tokenizer), RESOURCE_EXHAUSTED (the queue is full),
  // UNAVAILABLE (draining, or the group is down).
  absl::StatusOr<std::unique_ptr<Generation>> Admit(const v1::GenerateRequest& req);

  // The prompt ids of token, text or chat input, errors naming the field.
  absl::StatusOr<std::vector<int32_t>> Prompt(const v1::GenerateRequest& req) const;

  // Ids for every job (generations and the benchmark's), unique within the process.
  uint64_t NextJobId() { return next_id_++; }

 private:
  Scheduler& scheduler_;
  Metrics& metrics_;
  const ServiceInfo& info_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace q38
