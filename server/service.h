// The public gRPC services: q38.v1.Q38 (Generate, Benchmark, GetManifest, GetInfo) and q38.v1.Admin
// (Drain, Shutdown). Handlers check access (server/access.h: the API key; Benchmark, the full manifest
// and Admin are for admins); Generate is the shared lifecycle of server/generation.h.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "q38/v1/q38.grpc.pb.h"
#include "server/access.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/raw_rpc.h"
#include "server/scheduler.h"
#include "server/service_info.h"

namespace q38 {

// Every method takes its request as raw bytes (server/raw_rpc.h).
using Q38RawService = v1::Q38::WithRawCallbackMethod_Generate<v1::Q38::WithRawCallbackMethod_Benchmark<
    v1::Q38::WithRawCallbackMethod_GetManifest<v1::Q38::WithRawCallbackMethod_GetInfo<v1::Q38::Service>>>>;
using AdminRawService = v1::Admin::WithRawCallbackMethod_Drain<v1::Admin::WithRawCallbackMethod_Shutdown<v1::Admin::Service>>;

class Q38Service final : public Q38RawService {
 public:
  Q38Service(Scheduler& scheduler, Metrics& metrics, const Access& access, const ServiceInfo& info,
             Generations& generations)
      : scheduler_(scheduler), metrics_(metrics), access_(access), info_(info), generations_(generations) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Benchmark(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* GetManifest(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req, grpc::ByteBuffer* out) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req, grpc::ByteBuffer* out) override;

  void SetState(const std::string& state);

 private:
  // The handlers behind the RPCs above, which check access and keep exceptions in (rpc_guard.h).
  grpc::Status DoGenerate(grpc::ServerContextBase* ctx, const v1::GenerateRequest* req,
                          MessageWriter<v1::GenerateResponse>* writer);
  // server/benchmark_rpc.cc
  grpc::Status DoBenchmark(grpc::ServerContextBase* ctx, const v1::BenchmarkRequest* req,
                           MessageWriter<v1::BenchmarkProgress>* writer);
  // Submits `job` and waits for it, cancelling it when the client goes away.
  void RunToCompletion(MessageWriter<v1::BenchmarkProgress>& writer, const std::shared_ptr<Job>& job);
  v1::Manifest manifest();

  Scheduler& scheduler_;
  Metrics& metrics_;
  const Access& access_;
  ServiceInfo info_;
  Generations& generations_;
  std::mutex mu_;
};

grpc::Status ToGrpc(const absl::Status& s);

class AdminService final : public AdminRawService {
 public:
  // `drain` stops admission; `shutdown` starts the full graceful stop (both return at once).
  AdminService(std::function<void()> drain, std::function<void()> shutdown, Scheduler& scheduler, const Access& access)
      : drain_(std::move(drain)), shutdown_(std::move(shutdown)), scheduler_(scheduler), access_(access) {}
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req, grpc::ByteBuffer* out) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req, grpc::ByteBuffer* out) override;

 private:
  std::function<void()> drain_, shutdown_;
  Scheduler& scheduler_;
  const Access& access_;
};

}  // namespace q38
