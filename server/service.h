// The public gRPC services: q38.v1.Q38 (Generate, Benchmark, GetManifest, GetInfo) and q38.v1.Admin
// (Drain, Shutdown). Handlers check access (server/access.h: the API key; Benchmark, the full manifest
// and Admin are for admins), validate, admit through the scheduler and relay tokens.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "common/config.h"
#include "nlohmann/json.hpp"
#include "q38/v1/q38.grpc.pb.h"
#include "server/access.h"
#include "server/metrics.h"
#include "server/raw_rpc.h"
#include "server/scheduler.h"
#include "server/validation.h"
#include "tokenizer/tokenizer.h"

namespace q38 {

struct ServiceInfo {
  v1::Info info;
  v1::Manifest manifest;
  ModelLimits limits;
  std::vector<int32_t> eos_ids;  // generation_config's stop set
  const Tokenizer* tokenizer = nullptr;  // the checkpoint's; null when it ships none
  GenerationConfig generation;           // the benchmark's health checks sample with it
  // --chat_special_tokens_in_content: special tokens typed in chat messages become control tokens
  // (the behaviour of transformers' apply_chat_template; off: only the template's markers do).
  bool chat_special_tokens_in_content = false;
  nlohmann::json build;                  // the bundle's build manifest; null without a bundle
  // Gathers the worker manifests again and checks them (group, bundle): the benchmark's second look.
  std::function<absl::StatusOr<v1::Manifest>()> refresh_manifest;
};

// Every method takes its request as raw bytes (server/raw_rpc.h).
using Q38RawService = v1::Q38::WithRawCallbackMethod_Generate<v1::Q38::WithRawCallbackMethod_Benchmark<
    v1::Q38::WithRawCallbackMethod_GetManifest<v1::Q38::WithRawCallbackMethod_GetInfo<v1::Q38::Service>>>>;
using AdminRawService = v1::Admin::WithRawCallbackMethod_Drain<v1::Admin::WithRawCallbackMethod_Shutdown<v1::Admin::Service>>;

class Q38Service final : public Q38RawService {
 public:
  Q38Service(Scheduler& scheduler, Metrics& metrics, const Access& access, const ServiceInfo& info)
      : scheduler_(scheduler), metrics_(metrics), access_(access), info_(info) {}

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
  // The prompt ids of tokens, text or chat input.
  absl::StatusOr<std::vector<int32_t>> Prompt(const v1::GenerateRequest& req) const;
  // Submits `job` and waits for it, cancelling it when the client goes away.
  void RunToCompletion(grpc::ServerContextBase* ctx, const std::shared_ptr<Job>& job);
  v1::Manifest manifest();

  Scheduler& scheduler_;
  Metrics& metrics_;
  const Access& access_;
  ServiceInfo info_;
  std::mutex mu_;
  std::atomic<uint64_t> next_id_{1};
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
