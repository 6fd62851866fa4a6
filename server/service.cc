#include "server/service.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/rpc_guard.h"
#include "server/text_stream.h"

namespace q38 {

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
  absl::StatusOr<std::unique_ptr<Generation>> generation = generations_.Admit(*req);
  if (!generation.ok()) return ToGrpc(generation.status());
  const bool has_deadline = ctx->deadline() != std::chrono::system_clock::time_point::max();
  // A client cancel or a deadline wakes the relay at once (gRPC's OnCancel); the job stops within
  // one step.
  // A write can fail on a call that gRPC has not yet marked cancelled; either way the call is gone.
  // The server's copy of the deadline is the client's plus the request's transit time, so the
  // client's own timer ends the call a little before it: a call gone that close to its deadline
  // went for the deadline.
  bool write_failed = false;
  auto write = [&](const v1::GenerateResponse& r) {
    write_failed = !writer->Write(r);
    return !write_failed;
  };
  auto cancelled = [&] {
    if (!write_failed && !ctx->IsCancelled()) return worker::v1::CANCEL_REASON_UNSPECIFIED;
    constexpr auto kTransitSlack = std::chrono::milliseconds(100);
    return has_deadline && std::chrono::system_clock::now() + kTransitSlack >= ctx->deadline()
               ? worker::v1::CANCEL_REASON_DEADLINE
               : worker::v1::CANCEL_REASON_CLIENT;
  };
  Generation& g = **generation;
  writer->OnCancelled([&g] { g.Wake(); });
  const absl::Status relayed = g.Relay(write, cancelled);
  writer->OnCancelled(nullptr);
  return ToGrpc(relayed);
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
