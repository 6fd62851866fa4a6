// Starts the real q38-server (which spawns real q38-worker processes) on loopback for a test, and
// talks to it over gRPC. Each harness gets its own run directory, ports and checkpoint.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "q38/v1/q38.grpc.pb.h"

namespace q38::e2e {

// The path of a built tool: $Q38_BIN_DIR/name when set (binaries carried to another machine),
// else where this build put it.
std::string ToolPath(const std::string& name, const std::string& built);
#define Q38_SERVER_PATH ::q38::e2e::ToolPath("q38-server", Q38_SERVER_BIN)
#define Q38_WORKER_PATH ::q38::e2e::ToolPath("q38-worker", Q38_WORKER_BIN)

struct ServerOptions {
  int tp = 4;
  int queue_size = 4;
  int drain_timeout_s = 10;
  std::string restart_policy = "exit";
  int comm_timeout_ms = 10000;  // the server's default: two e2e servers may share two cores
  std::vector<std::string> extra_flags;
  std::string server_binary = Q38_SERVER_PATH;
  std::string worker_binary = Q38_WORKER_PATH;  // empty: the server picks (a bundle's own)
  std::vector<std::string> env;                // KEY=VALUE set in the server's environment
  std::string model;                           // empty: TinyCheckpoint()
};

// The tiny checkpoint every e2e test uses (generated once per test binary, seed 1).
const std::string& TinyCheckpoint();

class Server {
 public:
  explicit Server(const ServerOptions& options = {});
  ~Server();  // SIGKILLs whatever is still running

  bool ready() const { return grpc_port_ > 0; }
  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  v1::Q38::Stub& api() { return *api_; }
  v1::Admin::Stub& admin() { return *admin_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  const std::string& log_path() const { return log_; }
  // The --run_dir the harness gives the server.
  std::string run_dir() const { return dir_ + "/run"; }

  // Sends `sig` to the coordinator and waits for it to exit; returns its exit code (or 128+signal),
  // also when it already exited during startup.
  int SignalAndWait(int sig, int timeout_s = 30);
  // The worker pids named by the manifest.
  std::vector<pid_t> WorkerPids();

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int grpc_port_ = 0, metrics_port_ = 0;
  std::string dir_, log_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Q38::Stub> api_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

struct Streamed {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<v1::TokenLogprob> logprobs;
  v1::GenerateResponse last;
  int messages = 0;
};

// Runs Generate to the end.
Streamed Generate(v1::Q38::Stub& api, const v1::GenerateRequest& req, int timeout_ms = 60000);
v1::GenerateRequest TokensRequest(const std::vector<int32_t>& ids, int max_tokens);

// A process exists (and is not a zombie).
bool Alive(pid_t pid);
// Waits up to timeout_ms for every pid to be gone.
bool AllGone(const std::vector<pid_t>& pids, int timeout_ms);
// Plain HTTP GET of http://127.0.0.1:port/path.
std::string HttpGet(int port, const std::string& path);
// The value of an unlabelled sample in the exposition at 127.0.0.1:port/metrics (−1 if absent).
double MetricValue(int port, const std::string& name);
// Waits until no request runs or waits, by the server's own gauges.
bool WaitForIdle(int metrics_port, int timeout_ms);
// Waits until the gauge `name` reads `value` (requests admitted, queued): a loaded machine may
// take a while to get a request that far, so tests wait for the state instead of sleeping.
bool WaitForMetric(int metrics_port, const std::string& name, double value, int timeout_ms);

}  // namespace q38::e2e
