// The coordinator's lifecycle as a short state machine:
//
//   starting ──► ready ◄──► draining ──► stopping ──► stopped
//                  │  ▲ (a worker failed, restart policy)
//                  ▼  │
//                restarting
//
// Start verifies the bundle, spawns and checks the workers, and opens the ports; Serve turns
// posted events (a signal, Admin.Drain or .Shutdown, a failed group) into transitions until the
// server stops; Stop drains, gives the workers and the ports back. Every way out is one
// ServerExit (common/exit_codes.h, the table in server/README.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/exit_codes.h"
#include "grpcpp/grpcpp.h"
#include "provenance/bundle.h"
#include "server/access.h"
#include "server/contract.h"
#include "server/http/http_front_end.h"
#include "server/metrics.h"
#include "server/run_dir.h"
#include "server/scheduler.h"
#include "server/service.h"
#include "server/supervisor.h"

namespace q38 {

// Everything the flags say, checked for form (server_main.cc); the coordinator checks the rest.
struct CoordinatorOptions {
  std::string model;
  int tp = 1;
  std::string device = "cpu";
  std::vector<int> gpus;  // one per rank
  bool decode_graph = true;
  std::string listen = "127.0.0.1:50051";
  std::string metrics = "127.0.0.1:9090";  // empty: no /metrics
  std::string http;                        // empty: no HTTP API
  std::string served_model_name;           // empty: the model directory's name
  std::string unix_socket;
  int queue_size = 16;
  int drain_timeout_s = 30;
  bool restart_on_failure = false;  // --restart_policy restart
  int max_restarts = 3;
  int startup_timeout_s = 120;
  int step_timeout_s = 60;
  int comm_timeout_ms = 10000;
  std::string cpu_comm = "shm", cpu_math = "fast";
  int cpu_threads = 0;
  std::string cuda_grid_kernels = "all";  // GPU workers' decode grid kernels (docs/cuda.md)
  int64_t max_context = 4096;
  int64_t prefill_chunk = 8192;
  std::string run_dir, worker_binary, ready_file;
  std::string bundle, source;
  std::optional<Contract> contract;
  std::vector<std::string> worker_env;
  AccessOptions access;
  bool chat_special_tokens_in_content = false;
  int64_t max_request_bytes = 0;  // 0: 32 bytes per token of the context, at least 1 MiB
};

enum class CoordinatorState { kStarting, kReady, kRestarting, kDraining, kStopping, kStopped };
// "starting", "ready", "loading" (restarting: what GetInfo and the metrics have always said),
// "draining", "stopping", "stopped".
const char* StateName(CoordinatorState state);

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  // Start, Serve and Stop; returns how the server ended.
  ServerExit Run();

  // What signal handlers, RPCs, the reaper and the scheduler may do: post an event for Serve.
  void PostShutdown();
  void PostDrain();
  void PostGroupFailed(const std::string& what, int generation);

 private:
  enum class Event { kShutdown, kDrain, kGroupFailed };
  struct Posted {
    Event event;
    std::string detail;
    int generation = 0;  // kGroupFailed: the group it happened to (a restart makes older ones stale)
  };
  Posted NextEvent();

  ServerExit Start();
  ServerExit StartGroup();  // spawns the workers and checks them (also on a restart)
  ServerExit CheckGroup();  // 0 or the exit code of the first check that fails
  ServerExit LoadTokenizer();
  void FillServiceInfo();
  ServerExit OpenPorts();
  ServerExit Serve();
  // A failed group is restarted while the policy and the restarts left allow; false: give up.
  bool Restart(const std::string& detail);
  void Stop();
  void Enter(CoordinatorState state);
  v1::Manifest ServedManifest() const;
  void SampleMemory();
  void WriteReadyFile() const;

  const CoordinatorOptions options_;
  CoordinatorState state_ = CoordinatorState::kStarting;
  int restarts_ = 0;

  std::mutex events_mu_;
  std::condition_variable events_cv_;
  std::deque<Posted> events_;

  std::optional<ModelConfig> config_;
  std::optional<GenerationConfig> generation_;
  Bundle bundle_;
  std::string worker_binary_;
  int64_t max_context_ = 0;
  int64_t max_request_bytes_ = 0;
  std::optional<RunDir> run_dir_;
  std::optional<Access> access_;
  std::unique_ptr<Metrics> metrics_;
  int metrics_port_ = 0;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ServiceInfo info_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Generations> generations_;
  std::unique_ptr<Q38Service> api_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<grpc::ResourceQuota> quota_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  std::unique_ptr<http::HttpFrontEnd> http_api_;
  std::atomic<bool> sampling_{false};
  std::thread memory_sampler_;
};

}  // namespace q38
