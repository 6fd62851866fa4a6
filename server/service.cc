#include "server/service.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/rpc_guard.h"
#include "server/text_stream.h"

namespace q38 {
namespace {

v1::FinishReason ToProto(const std::string& reason) {
  if (reason == "eos") return v1::FINISH_REASON_EOS;
  if (reason == "length") return v1::FINISH_REASON_LENGTH;
  if (reason == "stop") return v1::FINISH_REASON_STOP;
  if (reason == "cancelled") return v1::FINISH_REASON_CANCELLED;
  if (reason == "deadline") return v1::FINISH_REASON_DEADLINE;
  return v1::FINISH_REASON_ERROR;
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

void Q38Service::SetState(const std::string& state) {
  std::lock_guard<std::mutex> l(mu_);
  info_.info.set_state(state);
}

grpc::ServerUnaryReactor* Q38Service::GetInfo(grpc::CallbackServerContext* call, const grpc::ByteBuffer* raw,
                                               grpc::ByteBuffer* raw_out) {
  return Unary<v1::GetInfoRequest, v1::Info>(call, raw, raw_out, [&](grpc::ServerContextBase& ctx, const auto&, v1::Info* out) {
    return Guarded("GetInfo", [&] {
      if (absl::Status s = access_.CheckUser(ctx); !s.ok()) return ToGrpc(s);
      std::lock_guard<std::mutex> l(mu_);
      *out = info_.info;
      return grpc::Status::OK;
    });
  });
}

v1::Manifest Q38Service::manifest() {
  std::lock_guard<std::mutex> l(mu_);
  return info_.manifest;
}

grpc::ServerUnaryReactor* Q38Service::GetManifest(grpc::CallbackServerContext* call, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* raw_out) {
  return Unary<v1::GetManifestRequest, v1::Manifest>(
      call, raw, raw_out, [&](grpc::ServerContextBase& ctx, const auto&, v1::Manifest* out) {
        return Guarded("GetManifest", [&] {
          if (absl::Status s = access_.CheckUser(ctx); !s.ok()) return ToGrpc(s);
          *out = access_.IsAdmin(ctx) ? manifest() : RedactForClients(manifest());
          return grpc::Status::OK;
        });
      });
}

absl::StatusOr<std::vector<int32_t>> Q38Service::Prompt(const v1::GenerateRequest& req) const {
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* Q38Service::Generate(grpc::CallbackServerContext* call,
                                                                 const grpc::ByteBuffer* raw) {
  return new ThreadedStream<v1::GenerateRequest, v1::GenerateResponse>(
      call, raw, [this](grpc::ServerContextBase& ctx, const v1::GenerateRequest& req, MessageWriter<v1::GenerateResponse>& writer) {
        return Guarded("Generate", [&] {
          if (absl::Status s = access_.CheckUser(ctx); !s.ok()) return ToGrpc(s);
          return DoGenerate(&ctx, &req, &writer);
        });
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* Q38Service::Benchmark(grpc::CallbackServerContext* call,
                                                                  const grpc::ByteBuffer* raw) {
  return new ThreadedStream<v1::BenchmarkRequest, v1::BenchmarkProgress>(
      call, raw, [this](grpc::ServerContextBase& ctx, const v1::BenchmarkRequest& req, MessageWriter<v1::BenchmarkProgress>& writer) {
        return Guarded("Benchmark", [&] {
          if (absl::Status s = access_.CheckUser(ctx); !s.ok()) return ToGrpc(s);
          // A benchmark holds the whole server: it is an operator's call.
          if (absl::Status s = access_.CheckAdmin(ctx); !s.ok()) return ToGrpc(s);
          return DoBenchmark(&ctx, &req, &writer);
        });
      });
}

grpc::Status Q38Service::DoGenerate(grpc::ServerContextBase* ctx, const v1::GenerateRequest* req,
                                    MessageWriter<v1::GenerateResponse>* writer) {
  const Clock::time_point received = Clock::now();
  metrics_.RequestReceived();
  auto reject = [&](const absl::Status& s, const std::string& reason) {
    metrics_.Rejected(reason);
    return ToGrpc(s);
  };
  if (absl::Status s = ValidateGenerate(*req, info_.limits); !s.ok()) return reject(s, "invalid_argument");
  if (req->stop_size() > 0 && info_.tokenizer == nullptr) {
    return reject(absl::FailedPreconditionError("stop: this model ships no tokenizer; use stop_token_ids"), "no_tokenizer");
  }
  absl::StatusOr<std::vector<int32_t>> prompt = Prompt(*req);
  if (!prompt.ok()) {
    return reject(prompt.status(), absl::IsFailedPrecondition(prompt.status()) ? "no_tokenizer" : "invalid_argument");
  }
  auto job = std::make_shared<Job>();
  job->id = next_id_++;
  job->prompt = *std::move(prompt);
  if (absl::Status s = ValidatePrompt(job->prompt, req->max_tokens(), info_.limits); !s.ok()) {
    return reject(s, "invalid_argument");
  }
  const auto& sp = req->sampling();
  job->sampling.set_temperature(sp.has_temperature() ? sp.temperature() : 0.0f);
  job->sampling.set_top_k(sp.has_top_k() ? sp.top_k() : 0);
  job->sampling.set_top_p(sp.has_top_p() ? sp.top_p() : 1.0f);
  job->sampling.set_seed(sp.has_seed() ? sp.seed() : job->id);
  job->max_tokens = req->max_tokens();
  job->eos_ids.insert(info_.eos_ids.begin(), info_.eos_ids.end());
  if (!req->ignore_eos()) job->stop_ids = job->eos_ids;
  job->stop_ids.insert(req->stop_token_ids().begin(), req->stop_token_ids().end());
  job->received = received;
  if (absl::Status s = scheduler_.Submit(job); !s.ok()) {
    return reject(s, absl::IsResourceExhausted(s) ? "queue_full" : "unavailable");
  }
  metrics_.AddPromptTokens(static_cast<int64_t>(job->prompt.size()));
  const bool has_deadline = ctx->deadline() != std::chrono::system_clock::time_point::max();

  // Relay tokens (and their text) until the job finishes; a client cancel, a deadline or a stop
  // string stops it within one step.
  std::optional<TextStream> text;
  if (info_.tokenizer != nullptr) text.emplace(*info_.tokenizer, std::vector<std::string>(req->stop().begin(), req->stop().end()));
  bool stopped = false;
  Clock::time_point last = received;
  int32_t sent = 0;
  for (;;) {
    std::vector<int32_t> batch;
    bool done;
    {
      std::unique_lock<std::mutex> l(job->mu);
      job->cv.wait_for(l, std::chrono::milliseconds(20), [&] { return job->done || !job->tokens.empty(); });
      batch.assign(job->tokens.begin(), job->tokens.end());
      job->tokens.clear();
      done = job->done;
    }
    if (!batch.empty() && !stopped) {
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < batch.size(); ++i) {
        if (sent == 0) metrics_.ObserveTtft(Seconds(received, now));
        else metrics_.ObserveInterToken(Seconds(last, now));
        ++sent;
      }
      last = now;
      metrics_.AddGenerationTokens(static_cast<int64_t>(batch.size()));
      v1::GenerateResponse resp;
      resp.mutable_token_ids()->Add(batch.begin(), batch.end());
      if (text) {
        TextStream::Delta d = text->Add(batch);
        resp.set_text(std::move(d.text));
        if (d.stopped) {
          stopped = true;
          scheduler_.Cancel(job, "stop");
        }
      }
      if (!writer->Write(resp)) scheduler_.Cancel(job, "client");
    }
    if (done) break;
    if (ctx->IsCancelled()) {
      scheduler_.Cancel(job, has_deadline && std::chrono::system_clock::now() >= ctx->deadline() ? "deadline" : "client");
    }
  }
  // The last message: finish reason, usage and timings.
  std::lock_guard<std::mutex> l(job->mu);
  std::string reason = job->finish_reason;
  if (reason == "cancelled" && job->cancel_by == "deadline") reason = "deadline";
  if (stopped) reason = "stop";
  if (reason == "error") {
    metrics_.Failed(absl::IsUnavailable(job->error) ? "worker_unavailable" : "internal");
    return ToGrpc(job->error);
  }
  v1::GenerateResponse final_msg;
  if (text) final_msg.set_text(text->Finish());
  final_msg.set_finish_reason(ToProto(reason));
  final_msg.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(job->prompt.size()));
  final_msg.mutable_usage()->set_completion_tokens(sent);
  v1::Timings* t = final_msg.mutable_timings();
  const bool any = job->generated > 0;
  t->set_queue(Seconds(job->received, job->scheduled));
  t->set_prefill(any ? Seconds(job->scheduled, job->first_token) : 0);
  t->set_ttft(any ? Seconds(job->received, job->first_token) : 0);
  t->set_decode(any ? Seconds(job->first_token, job->last_token) : 0);
  t->set_tpot(job->generated > 1 ? t->decode() / (job->generated - 1) : 0);
  t->set_e2e(Seconds(job->received, job->finished));
  metrics_.ObserveQueue(t->queue());
  metrics_.ObserveE2e(t->e2e());
  if (any) {
    metrics_.ObservePrefill(t->prefill());
    metrics_.ObserveDecode(t->decode());
    if (job->generated > 1) metrics_.ObserveTpot(t->tpot());
  }
  if (reason == "cancelled" || reason == "deadline") {
    metrics_.Cancelled(reason == "deadline" ? "deadline" : job->cancel_by);
    if (job->cancel_by == "drain") return grpc::Status(grpc::StatusCode::CANCELLED, "server shutting down: drain deadline passed");
    if (reason == "deadline") return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }
  metrics_.Finished(reason);
  writer->Write(final_msg);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::Drain(grpc::CallbackServerContext* call, const grpc::ByteBuffer* raw,
                                               grpc::ByteBuffer* raw_out) {
  return Unary<v1::DrainRequest, v1::DrainResponse>(
      call, raw, raw_out, [&](grpc::ServerContextBase& ctx, const auto&, v1::DrainResponse* out) {
        return Guarded("Drain", [&] {
          if (absl::Status s = access_.CheckAdmin(ctx); !s.ok()) return ToGrpc(s);
          scheduler_.Drain(Clock::now());  // admission stops before this call returns
          drain_();                         // health and state follow on the control thread
          out->set_in_flight(scheduler_.running());
          out->set_waiting(scheduler_.waiting());
          return grpc::Status::OK;
        });
      });
}

grpc::ServerUnaryReactor* AdminService::Shutdown(grpc::CallbackServerContext* call, const grpc::ByteBuffer* raw,
                                                 grpc::ByteBuffer* raw_out) {
  return Unary<v1::ShutdownRequest, v1::ShutdownResponse>(
      call, raw, raw_out, [&](grpc::ServerContextBase& ctx, const auto&, v1::ShutdownResponse*) {
        return Guarded("Shutdown", [&] {
          if (absl::Status s = access_.CheckAdmin(ctx); !s.ok()) return ToGrpc(s);
          LOG(INFO) << "Shutdown requested by " << ctx.peer();
          shutdown_();
          return grpc::Status::OK;
        });
      });
}

}  // namespace q38
