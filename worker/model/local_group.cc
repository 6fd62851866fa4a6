#include "worker/model/local_group.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "worker/rank_device.h"

namespace q38 {

namespace {

// Long enough for one rank to fill a full-size synthetic n-gram table that the others map
// (host_shared_table.h) while they wait at the first collective.
constexpr int kGroupTimeoutMs = 300000;

// Rank r's weights: read from `store`, or drawn from `seed` without one.
absl::StatusOr<ModelWeights> RankWeights(const ModelConfig& config, const TensorStore* store, uint64_t seed,
                                         Backend& backend, const ShardSpec& shard) {
  if (store == nullptr) return SyntheticWeights(config, backend, shard, seed);
  return LoadWeights(config, *store, backend, shard);
}

// One status for the group. A rank that failed on its own (no such GPU, say) leaves the others
// waiting on the collective until it times out, so the first failure that is not such a wait
// leads and gives the code; every failing rank is named.
absl::Status GroupStatus(const std::vector<absl::Status>& results) {
  std::vector<size_t> failed;
  for (size_t r = 0; r < results.size(); ++r) {
    if (!results[r].ok()) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();
  const auto cause = std::find_if(failed.begin(), failed.end(),
                                  [&](size_t r) { return !absl::IsDeadlineExceeded(results[r]); });
  if (cause != failed.end()) std::rotate(failed.begin(), cause, cause + 1);  // the cause first, the rest in order
  std::vector<std::string> lines;
  for (size_t r : failed) lines.push_back(absl::StrCat("rank ", r, ": ", results[r].message()));
  return absl::Status(results[failed.front()].code(), absl::StrJoin(lines, "; "));
}

absl::Status RunGroup(const ModelConfig& config, const TensorStore* store, uint64_t seed, int tp,
                      const std::function<absl::Status(Model&)>& fn, const LocalGroupOptions& options) {
  if (tp < 1) return absl::InvalidArgumentError("tp must be at least 1");
  if (options.cpu_comm != "inprocess" && options.cpu_comm != "gloo" && options.cpu_comm != "shm") {
    return absl::InvalidArgumentError("cpu_comm: expected inprocess, shm or gloo, got " + options.cpu_comm);
  }
  if (options.cuda_comm != "auto" && options.cuda_comm != "ipc" && options.cuda_comm != "nccl" &&
      options.cuda_comm != "host") {
    return absl::InvalidArgumentError("cuda_comm: expected auto, ipc, nccl or host, got " + options.cuda_comm);
  }
  const bool staged = options.device == "cuda" && options.cuda_comm == "host";
  if (staged && options.model.decode_graph) {
    return absl::InvalidArgumentError("cuda_comm host: its synchronous copies cannot be recorded in the decode graph");
  }
  if (!staged && !options.gpus.empty() && static_cast<int>(options.gpus.size()) != tp) {
    return absl::InvalidArgumentError("a GPU for each rank is needed");
  }
  // CPU threads meet in process unless asked for shm or Gloo, and so do staged CUDA ranks; the others
  // rendezvous through a scratch directory, as the server's workers do.
  const bool in_process = options.device == "cpu" && options.cpu_comm == "inprocess";
  std::vector<std::unique_ptr<Communicator>> comms;
  if (in_process || staged) comms = MakeInProcessGroup(tp);
  std::string rendezvous = (std::filesystem::temp_directory_path() / "q38-group-XXXXXX").string();
  const bool rendezvous_needed = !in_process && !staged;
  if (options.processes && !rendezvous_needed) {
    return absl::InvalidArgumentError("processes: ranks in processes of their own meet over shm, gloo, CUDA IPC or NCCL");
  }
  if (rendezvous_needed && mkdtemp(rendezvous.data()) == nullptr) {
    return absl::InternalError("cannot create a rendezvous directory");
  }
  const int cpu_threads = options.cpu_threads > 0 ? options.cpu_threads : CpuThreadsPerRank(tp);
  const auto rank_main = [&](int r) -> absl::Status {
    RankDevice d;
    if (in_process) {
      d.backend = options.cpu_backend ? options.cpu_backend() : MakeCpuBackend(options.cpu_math, cpu_threads);
      d.comm = std::move(comms[r]);
    } else if (staged) {
      ASSIGN_OR_RETURN(d, OpenRankDevice({.device = "cuda", .gpu = options.gpus.empty() ? 0 : options.gpus[0],
                                          .cuda_grid_kernels = options.cuda_grid_kernels}));
      ASSIGN_OR_RETURN(d.comm, StageThroughHost(*d.backend, std::move(comms[r])));
    } else {
      ASSIGN_OR_RETURN(d, OpenRankDevice({.rank = r, .world = tp, .device = options.device,
                                          .gpu = options.gpus.empty() ? r : options.gpus[r],
                                          .rendezvous = rendezvous, .timeout_ms = kGroupTimeoutMs,
                                          .cpu_comm = options.cpu_comm, .cuda_comm = options.cuda_comm,
                                          .cuda_grid_kernels = options.cuda_grid_kernels,
                                          .cpu_math = options.cpu_math, .cpu_threads = cpu_threads}));
    }
    ASSIGN_OR_RETURN(ModelWeights weights, RankWeights(config, store, seed, *d.backend, {r, tp}));
    Model model(config, std::move(weights), *d.backend, *d.comm, options.model);
    return fn(model);
  };
  std::vector<absl::Status> results(tp);
  // Ranks 1.. as processes, forked before this process starts a thread or a device; rank 0 stays.
  std::vector<pid_t> children(tp, 0);
  for (int r = 1; options.processes && r < tp; ++r) {
    children[r] = fork();
    if (children[r] == 0) {
      const absl::Status s = rank_main(r);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
      std::fflush(nullptr);
      _exit(s.ok() ? 0 : 1);
    }
    if (children[r] < 0) results[r] = absl::InternalError(absl::StrCat("cannot fork rank ", r));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < (options.processes ? 1 : tp); ++r) threads.emplace_back([&, r] { results[r] = rank_main(r); });
  for (auto& t : threads) t.join();
  for (int r = 1; r < tp; ++r) {
    int status = 0;
    if (children[r] <= 0 || waitpid(children[r], &status, 0) != children[r]) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      results[r] = absl::UnavailableError(absl::StrCat("rank process ", children[r],
                                                       WIFEXITED(status) ? " exited with " : " died of signal ",
                                                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                                                       " (its message is on stderr)"));
    }
  }
  if (rendezvous_needed) std::filesystem::remove_all(rendezvous);
  return GroupStatus(results);
}

}  // namespace

absl::Status RunLocalGroup(const ModelConfig& config, const TensorStore& store, int tp,
                           const std::function<absl::Status(Model&)>& fn, const LocalGroupOptions& options) {
  return RunGroup(config, &store, 0, tp, fn, options);
}

absl::Status RunSyntheticGroup(const ModelConfig& config, uint64_t seed, int tp,
                               const std::function<absl::Status(Model&)>& fn, const LocalGroupOptions& options) {
  return RunGroup(config, nullptr, seed, tp, fn, options);
}

}  // namespace q38
