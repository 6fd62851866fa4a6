#include "server/generation.h"

#include "absl/strings/str_cat.h"
#include "proto/enum_names.h"

namespace q38 {
namespace {

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

Generation::Generation(Scheduler& scheduler, Metrics& metrics, const Tokenizer* tokenizer, std::vector<std::string> stop,
                       std::shared_ptr<Job> job)
    : scheduler_(scheduler), metrics_(metrics), job_(std::move(job)) {
  if (tokenizer != nullptr) text_.emplace(*tokenizer, std::move(stop));
}

Generation::~Generation() {
  if (!relayed_) scheduler_.Cancel(job_, worker::v1::CANCEL_REASON_CLIENT);
}

void Generation::Wake() {
  std::lock_guard<std::mutex> l(job_->mu);
  woken_ = true;
  job_->cv.notify_all();
}

absl::Status Generation::Relay(const Write& write, const Cancelled& cancelled,
                               std::optional<std::chrono::milliseconds> poll) {
  relayed_ = true;
  Job& job = *job_;
  bool stopped = false;
  Clock::time_point last = job.received;
  int32_t sent = 0;
  for (;;) {
    std::vector<int32_t> batch;
    std::vector<v1::TokenLogprob> logprobs;
    bool done;
    {
      std::unique_lock<std::mutex> l(job.mu);
      const auto ready = [&] { return job.done || !job.tokens.empty() || woken_; };
      if (poll) job.cv.wait_for(l, *poll, ready);
      else job.cv.wait(l, ready);
      woken_ = false;
      batch.assign(job.tokens.begin(), job.tokens.end());
      job.tokens.clear();
      logprobs.assign(job.logprobs.begin(), job.logprobs.end());
      job.logprobs.clear();
      done = job.done;
    }
    if (!batch.empty() && !stopped) {
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < batch.size(); ++i) {
        if (sent == 0) metrics_.ObserveTtft(Seconds(job.received, now));
        else metrics_.ObserveInterToken(Seconds(last, now));
        ++sent;
      }
      last = now;
      metrics_.AddGenerationTokens(static_cast<int64_t>(batch.size()));
      v1::GenerateResponse resp;
      resp.mutable_token_ids()->Add(batch.begin(), batch.end());
      for (v1::TokenLogprob& lp : logprobs) *resp.add_logprobs() = std::move(lp);
      if (text_) {
        TextStream::Delta d = text_->Add(batch);
        resp.set_text(std::move(d.text));
        if (d.stopped) {
          stopped = true;
          scheduler_.Cancel(job_, worker::v1::CANCEL_REASON_STOP_STRING);
        }
      }
      // A write fails once the call is gone; why it went (a deadline, say) is the cancel's reason.
      if (!write(resp)) {
        const worker::v1::CancelReason by = cancelled();
        scheduler_.Cancel(job_, by != worker::v1::CANCEL_REASON_UNSPECIFIED ? by : worker::v1::CANCEL_REASON_CLIENT);
      }
    }
    if (done) break;
    if (const worker::v1::CancelReason by = cancelled(); by != worker::v1::CANCEL_REASON_UNSPECIFIED) {
      scheduler_.Cancel(job_, by);
    }
  }
  // The last message: finish reason, usage and timings.
  std::lock_guard<std::mutex> l(job.mu);
  v1::FinishReason reason = job.finish_reason;
  if (reason == v1::FINISH_REASON_CANCELLED && job.cancel_by == worker::v1::CANCEL_REASON_DEADLINE) {
    reason = v1::FINISH_REASON_DEADLINE;
  }
  if (stopped) reason = v1::FINISH_REASON_STOP;
  if (reason == v1::FINISH_REASON_ERROR) {
    metrics_.Failed(absl::IsUnavailable(job.error) ? "worker_unavailable" : "internal");
    return job.error;
  }
  v1::GenerateResponse final_msg;
  if (text_) final_msg.set_text(text_->Finish());
  final_msg.set_finish_reason(reason);
  final_msg.mutable_usage()->set_prompt_tokens(prompt_tokens());
  final_msg.mutable_usage()->set_completion_tokens(sent);
  v1::Timings* t = final_msg.mutable_timings();
  const bool any = job.generated > 0;
  t->set_queue(Seconds(job.received, job.scheduled));
  t->set_prefill(any ? Seconds(job.scheduled, job.first_token) : 0);
  t->set_ttft(any ? Seconds(job.received, job.first_token) : 0);
  t->set_decode(any ? Seconds(job.first_token, job.last_token) : 0);
  t->set_tpot(job.generated > 1 ? t->decode() / (job.generated - 1) : 0);
  t->set_e2e(Seconds(job.received, job.finished));
  metrics_.ObserveQueue(t->queue());
  metrics_.ObserveE2e(t->e2e());
  if (any) {
    metrics_.ObservePrefill(t->prefill());
    metrics_.ObserveDecode(t->decode());
    if (job.generated > 1) metrics_.ObserveTpot(t->tpot());
  }
  if (reason == v1::FINISH_REASON_DEADLINE) {
    metrics_.Cancelled(CancelReasonName(worker::v1::CANCEL_REASON_DEADLINE));
    return absl::DeadlineExceededError("deadline exceeded");
  }
  if (reason == v1::FINISH_REASON_CANCELLED) {
    metrics_.Cancelled(CancelReasonName(job.cancel_by));
    if (job.cancel_by == worker::v1::CANCEL_REASON_DRAIN) return absl::CancelledError("server shutting down: drain deadline passed");
    return absl::CancelledError("cancelled");
  }
  metrics_.Finished(FinishReasonName(reason));
  write(final_msg);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Generations::Prompt(const v1::GenerateRequest& req) const {
  if (req.input_case() == v1::GenerateRequest::kTokens) {
    return std::vector<int32_t>(req.tokens().ids().begin(), req.tokens().ids().end());
  }
  const Tokenizer* tok = info_.tokenizer;
  if (tok == nullptr) return absl::FailedPreconditionError("input: this model ships no tokenizer; send tokens");
  const char* field = req.input_case() == v1::GenerateRequest::kText ? "text: " : "chat: ";
  absl::StatusOr<std::vector<int32_t>> ids;
  if (req.input_case() == v1::GenerateRequest::kText) {
    ids = tok->Encode(req.text());
  } else {
    std::vector<ChatMessage> messages;
    for (const auto& m : req.chat().messages()) messages.push_back({m.role(), m.content(), std::nullopt, false});
    ChatOptions options;
    options.add_generation_prompt = !req.chat().has_add_generation_prompt() || req.chat().add_generation_prompt();
    if (req.chat().has_enable_thinking()) options.enable_thinking = req.chat().enable_thinking();
    // Only the template's own markers are control tokens, so a message cannot end its turn or open
    // a system turn by typing <|im_end|> (unless the operator asked for the old behaviour).
    absl::StatusOr<std::vector<ChatSegment>> segments = tok->ApplyChatTemplateSegments(messages, options);
    if (!segments.ok()) return absl::Status(segments.status().code(), absl::StrCat(field, segments.status().message()));
    if (info_.chat_special_tokens_in_content) {
      std::string text;
      for (const ChatSegment& s : *segments) text += s.text;
      ids = tok->Encode(text);
    } else {
      ids = tok->EncodeChat(*segments);
    }
  }
  if (!ids.ok()) return absl::Status(ids.status().code(), absl::StrCat(field, ids.status().message()));
  return ids;
}

absl::StatusOr<std::unique_ptr<Generation>> Generations::Admit(const v1::GenerateRequest& req) {
  const Clock::time_point received = Clock::now();
  metrics_.RequestReceived();
  auto reject = [&](const absl::Status& s, const std::string& reason) {
    metrics_.Rejected(reason);
    return s;
  };
  if (absl::Status s = ValidateGenerate(req, info_.limits); !s.ok()) return reject(s, "invalid_argument");
  if (req.stop_size() > 0 && info_.tokenizer == nullptr) {
    return reject(absl::FailedPreconditionError("stop: this model ships no tokenizer; use stop_token_ids"), "no_tokenizer");
  }
  absl::StatusOr<std::vector<int32_t>> prompt = Prompt(req);
  if (!prompt.ok()) {
    return reject(prompt.status(), absl::IsFailedPrecondition(prompt.status()) ? "no_tokenizer" : "invalid_argument");
  }
  auto job = std::make_shared<Job>();
  job->id = NextJobId();
  job->prompt = *std::move(prompt);
  if (absl::Status s = ValidatePrompt(job->prompt, req.max_tokens(), info_.limits); !s.ok()) {
    return reject(s, "invalid_argument");
  }
  const auto& sp = req.sampling();
  job->sampling.set_temperature(sp.has_temperature() ? sp.temperature() : 0.0f);
  job->sampling.set_top_k(sp.has_top_k() ? sp.top_k() : 0);
  job->sampling.set_top_p(sp.has_top_p() ? sp.top_p() : 1.0f);
  job->sampling.set_seed(sp.has_seed() ? sp.seed() : job->id);
  job->max_tokens = req.max_tokens();
  job->eos_ids.insert(info_.eos_ids.begin(), info_.eos_ids.end());
  if (!req.ignore_eos()) job->stop_ids = job->eos_ids;
  job->stop_ids.insert(req.stop_token_ids().begin(), req.stop_token_ids().end());
  if (req.has_logprobs()) job->logprobs_asked = req.logprobs();
  job->received = received;
  if (absl::Status s = scheduler_.Submit(job); !s.ok()) {
    return reject(s, absl::IsResourceExhausted(s) ? "queue_full" : "unavailable");
  }
  metrics_.AddPromptTokens(static_cast<int64_t>(job->prompt.size()));
  return std::make_unique<Generation>(scheduler_, metrics_, info_.tokenizer,
                                      std::vector<std::string>(req.stop().begin(), req.stop().end()), std::move(job));
}

}  // namespace q38
