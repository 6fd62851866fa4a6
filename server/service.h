// The public gRPC services: q38.v1.Q38 (Generate, Benchmark, GetManifest, GetInfo) and q38.v1.Admin
// (Drain, Shutdown, loopback only). Handlers validate, admit through the scheduler and relay tokens.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "common/config.h"
#include "nlohmann/json.hpp"
#include "q38/v1/q38.grpc.pb.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/tokenizer/tokenizer.h"
#include "server/validation.h"

namespace q38 {

struct ServiceInfo {
  v1::Info info;
  v1::Manifest manifest;
  ModelLimits limits;
  std::vector<int32_t> eos_ids;  // generation_config's stop set
  const Tokenizer* tokenizer = nullptr;  // the checkpoint's; null when it ships none
  GenerationConfig generation;           // the benchmark's health checks sample with it
  nlohmann::json build;                  // the bundle's build manifest; null without a bundle
  // Gathers the worker manifests again and checks them (group, bundle): the benchmark's second look.
  std::function<absl::StatusOr<v1::Manifest>()> refresh_manifest;
};

class Q38Service final : public v1::Q38::Service {
 public:
  Q38Service(Scheduler& scheduler, Metrics& metrics, const ServiceInfo& info)
      : scheduler_(scheduler), metrics_(metrics), info_(info) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  // server/benchmark_rpc.cc
  grpc::Status Benchmark(grpc::ServerContext* ctx, const v1::BenchmarkRequest* req,
                         grpc::ServerWriter<v1::BenchmarkProgress>* writer) override;
  grpc::Status GetManifest(grpc::ServerContext*, const v1::GetManifestRequest*, v1::Manifest* out) override;
  grpc::Status GetInfo(grpc::ServerContext*, const v1::GetInfoRequest*, v1::Info* out) override;

  void SetState(const std::string& state);

 private:
  // The prompt ids of tokens, text or chat input.
  absl::StatusOr<std::vector<int32_t>> Prompt(const v1::GenerateRequest& req) const;
  // Submits `job` and waits for it, cancelling it when the client goes away.
  void RunToCompletion(grpc::ServerContext* ctx, const std::shared_ptr<Job>& job);
  v1::Manifest manifest();

  Scheduler& scheduler_;
  Metrics& metrics_;
  ServiceInfo info_;
  std::mutex mu_;
  std::atomic<uint64_t> next_id_{1};
};

grpc::Status ToGrpc(const absl::Status& s);

class AdminService final : public v1::Admin::Service {
 public:
  // `drain` stops admission; `shutdown` starts the full graceful stop (both return at once).
  AdminService(std::function<void()> drain, std::function<void()> shutdown, Scheduler& scheduler)
      : drain_(std::move(drain)), shutdown_(std::move(shutdown)), scheduler_(scheduler) {}
  grpc::Status Drain(grpc::ServerContext* ctx, const v1::DrainRequest*, v1::DrainResponse* out) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx, const v1::ShutdownRequest*, v1::ShutdownResponse*) override;

 private:
  std::function<void()> drain_, shutdown_;
  Scheduler& scheduler_;
};

// Admin calls are honored only from loopback or a Unix socket peer.
bool IsLocalPeer(const std::string& peer);

}  // namespace q38
