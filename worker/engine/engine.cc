#include "worker/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace q38 {
namespace {

// What rank 0 tells every rank after each step.
enum class Step : int32_t { kContinue = 0, kFinished = 1, kCancelled = 2 };
struct Decision {
  int32_t token;
  Step step;
  uint64_t request_id;
};

// `token_logit` less the log-sum-exp, and the summary's alternatives likewise.
TokenLogprobs FromSummary(const cpu::LogitsSummary& s, float token_logit, int32_t alternatives) {
  TokenLogprobs lp;
  lp.logprob = static_cast<float>(token_logit - s.log_sum_exp);
  for (size_t j = 0; j < s.top.size() && j < static_cast<size_t>(alternatives); ++j) {
    lp.top.push_back({s.top[j].first, static_cast<float>(s.top[j].second - s.log_sum_exp)});
  }
  return lp;
}

}  // namespace

Engine::Engine(Model& model, int64_t max_context, int64_t valid_vocab)
    : model_(model), max_context_(max_context), valid_vocab_(valid_vocab), state_(model.NewSequence(max_context)) {}

absl::StatusOr<int32_t> Engine::Decide(const Buffer& local, const RunSpec& spec, uint64_t step,
                                        std::optional<TokenLogprobs>& logprobs) {
  const bool leader = model_.comm().rank() == 0;
  const int64_t k = std::max(1, spec.logprobs);
  // Greedy (SampleToken's temperature test): each rank's (max, id), or its top k and log-sum-exp,
  // instead of every logit.
  if (!(spec.sampling.temperature > 0)) {
    if (spec.logprobs < 0) return model_.GreedyToken(local, valid_vocab_);
    ASSIGN_OR_RETURN(cpu::LogitsSummary s, model_.SummarizeLogits(local, valid_vocab_, k));
    if (s.top.empty()) return 0;  // nothing above −inf: SampleToken's 0
    if (leader) logprobs = FromSummary(s, s.top[0].second, spec.logprobs);
    return s.top[0].first;
  }
  ASSIGN_OR_RETURN(std::vector<float> logits, model_.GatherLogits(local));
  if (!leader) return 0;
  const int64_t V = static_cast<int64_t>(logits.size());
  const int32_t token = SampleToken(logits.data(), V, valid_vocab_, spec.sampling, step);
  if (spec.logprobs >= 0) {
    const int64_t n = std::clamp<int64_t>(valid_vocab_, 1, V);
    std::vector<float> part(2 * k + 2);
    cpu::TopLogits(logits.data(), n, k, part.data());
    logprobs = FromSummary(cpu::MergeTopLogits(part.data(), 1, k, n), logits[token], spec.logprobs);
  }
  return token;
}

absl::StatusOr<RunResult> Engine::Run(const RunSpec& spec, const Emit& emit, const std::function<bool()>& cancelled) {
  model_.backend().BindToThread();
  Communicator& comm = model_.comm();
  const bool leader = comm.rank() == 0;
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (spec.prompt.empty() || spec.max_tokens < 1 || total > max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("run: prompt of ", spec.prompt.size(), " tokens plus ",
                                                   spec.max_tokens, " new ones does not fit the context of ",
                                                   max_context_));
  }
  // Ranks agree on the request before touching their caches.
  Decision d{0, Step::kContinue, spec.request_id};
  RETURN_IF_ERROR(comm.Broadcast(&d, sizeof(d), 0));
  if (d.request_id != spec.request_id) {
    return absl::InternalError(absl::StrCat("run: rank ", comm.rank(), " got request ", spec.request_id,
                                            " while rank 0 runs ", d.request_id));
  }
  model_.Reset(state_);
  RunResult result;
  const auto start = std::chrono::steady_clock::now();
  // After each block of prefill (mixer, MoE) rank 0 says whether to go on; every rank leaves at the
  // same block.
  auto between_blocks = [&]() -> absl::Status {
    progress_.fetch_add(1, std::memory_order_relaxed);
    Decision at_layer{0, leader && cancelled() ? Step::kCancelled : Step::kContinue, spec.request_id};
    RETURN_IF_ERROR(comm.Broadcast(&at_layer, sizeof(at_layer), 0));
    return at_layer.step == Step::kCancelled ? absl::CancelledError("cancelled during prefill") : absl::OkStatus();
  };
  Buffer local;
  for (size_t begin = 0; begin < spec.prompt.size(); begin += spec.prefill_chunk) {
    const size_t end = std::min(spec.prompt.size(), begin + static_cast<size_t>(spec.prefill_chunk));
    const auto chunk_start = std::chrono::steady_clock::now();
    absl::StatusOr<Buffer> out = model_.Forward({spec.prompt.begin() + begin, spec.prompt.begin() + end}, state_, 1, between_blocks);
    if (absl::IsCancelled(out.status())) {
      result.finish_reason = v1::FINISH_REASON_CANCELLED;
      return result;
    }
    ASSIGN_OR_RETURN(local, std::move(out));
    if (spec.time_prefill_chunks) {
      RETURN_IF_ERROR(model_.backend().Synchronize());
      result.prefill_chunk_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - chunk_start).count());
    }
  }
  for (uint64_t step = 0;; ++step) {
    std::optional<TokenLogprobs> logprobs;
    ASSIGN_OR_RETURN(const int32_t token, Decide(local, spec, step, logprobs));
    // The prefill is done when its token is known: on a GPU, Forward only enqueues the work.
    if (step == 0) result.prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (leader) {
      d.token = token;
      const bool last = spec.stop_ids.count(d.token) || static_cast<int32_t>(step) + 1 >= spec.max_tokens;
      d.step = cancelled() ? Step::kCancelled : (last ? Step::kFinished : Step::kContinue);
    }
    RETURN_IF_ERROR(comm.Broadcast(&d, sizeof(d), 0));
    if (d.step == Step::kCancelled) {
      result.finish_reason = v1::FINISH_REASON_CANCELLED;
      return result;
    }
    if (leader) emit(d.token, logprobs);
    ++result.generated;
    if (d.step == Step::kFinished) {
      result.finish_reason = spec.eos_ids.count(d.token)    ? v1::FINISH_REASON_EOS
                             : spec.stop_ids.count(d.token) ? v1::FINISH_REASON_STOP
                                                            : v1::FINISH_REASON_LENGTH;
      return result;
    }
    ASSIGN_OR_RETURN(local, model_.Forward({d.token}, state_));
    progress_.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace q38
