// Spawns the rank workers (fork + exec, nothing else between), hands each its rank, socket and
// the communicator rendezvous, waits for them to serve, and watches them: a worker that dies is
// reported at once with its rank and exit code or signal (docs/design.md §1).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "q38/worker/v1/worker.grpc.pb.h"

namespace q38 {

struct SupervisorOptions {
  std::string worker_binary;
  std::string model;
  std::string device = "cpu";
  std::vector<int> gpus;      // with cuda: the GPU of each rank
  bool decode_graph = true;
  std::string run_dir;  // sockets and the rendezvous live here
  int tp = 1;
  int64_t max_context = 4096;
  int64_t prefill_chunk = 8192;
  int comm_timeout_ms = 10000;
  int heartbeat_ms = 1000;  // a running rank reports its progress at least this often
  // The workers' environment: this process's, with these KEY=VALUE entries set over it (a bundle's
  // LD_LIBRARY_PATH, --worker_env).
  std::vector<std::string> env;
  std::string cpu_comm = "shm";  // CPU ranks: shm (one host) or gloo (TCP)
  std::string cpu_math = "fast";  // CPU ranks: fast or exact (kernels/backend.h CpuMath)
  int cpu_threads = 0;            // threads per fast CPU rank; 0: the cores shared out over the ranks
  std::string cuda_grid_kernels = "all";  // CUDA ranks' decode grid kernels (--cuda_grid_kernels)
};

class Supervisor {
 public:
  // Called on the reaper thread with the rank, how it ended, and the generation of its group.
  using DeathCallback = std::function<void(int rank, const std::string& how, int generation)>;
  Supervisor(SupervisorOptions options, DeathCallback on_death);
  ~Supervisor();

  // Spawns a fresh group and waits until every rank reports ready; each startup phase of a rank
  // (answering, joining the communicator, loading) must finish within `deadline`.
  absl::Status Start(absl::Duration deadline);
  // Called with (rank, layers loaded, layers total) as a rank loads its weights.
  void OnLoadProgress(std::function<void(int, int, int)> progress) { progress_ = std::move(progress); }
  // Asks every rank to shut down, waits up to `grace`, then SIGKILLs the rest; reaps all.
  void Stop(absl::Duration grace);
  // SIGKILLs every rank and reaps them (a broken group cannot be trusted to stop itself).
  void KillAll();

  const std::vector<worker::v1::WorkerInfo>& infos() const { return infos_; }
  // Asks every rank again, re-reading its mapped shared objects, and keeps the answers.
  absl::Status RefreshManifests(absl::Duration timeout);
  worker::v1::Worker::Stub& stub(int rank) { return *stubs_[rank]; }
  int tp() const { return options_.tp; }
  std::vector<pid_t> pids() const;
  int generation() const { return generation_; }

 private:
  absl::Status Spawn(int rank, const std::string& rendezvous);
  // A rank that exited while the group starts: FAILED_PRECONDITION when it refused the checkpoint,
  // UNAVAILABLE otherwise; OK while all run.
  absl::Status StartupExit(const std::string& phase) const;
  void Reap();

  SupervisorOptions options_;
  DeathCallback on_death_;
  std::function<void(int, int, int)> progress_;
  int generation_ = 0;
  mutable std::mutex mu_;
  std::vector<pid_t> pids_;  // 0 once reaped
  std::vector<int> exit_status_;  // waitpid's status of each reaped rank
  bool stopping_ = false;
  int pipe_read_ = -1;   // inherited by every worker
  int pipe_write_ = -1;  // held open here only: a worker seeing EOF knows this process is gone
  std::vector<std::unique_ptr<worker::v1::Worker::Stub>> stubs_;
  std::vector<worker::v1::WorkerInfo> infos_;
  std::thread reaper_;
};

}  // namespace q38
