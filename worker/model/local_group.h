// A tensor-parallel group inside one process: one thread per rank, each with its own backend and
// weight shard: CPU ranks joined by in-process collectives, or CUDA ranks (a GPU each, or several
// on one) joined by CUDA IPC or NCCL, or for tests through host memory.
// The model runner, the benchmark and the tests use it; servers run one rank per process instead.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

struct LocalGroupOptions {
  std::string device = "cpu";  // cpu | cuda
  std::vector<int> gpus;       // with cuda: rank r uses gpus[r] (default: GPU r)
  // CPU ranks: "inprocess" (threads at a barrier), or "shm" (a shared-memory segment, as the
  // server's worker processes meet by default) or "gloo" (TCP over loopback), so that a runner
  // measurement can be compared with the server's like for like.
  std::string cpu_comm = "inprocess";
  // CPU ranks' arithmetic: fast, as the server's workers run by default, or the exact reference.
  CpuMath cpu_math = CpuMath::kFast;
  // Threads of each fast CPU rank; 0: this host's cores shared out over the ranks.
  int cpu_threads = 1;
  // In-process CPU ranks: their backend (default: the FP32 CPU backend). The precision study runs
  // the FP16-contract emulation sharded with it.
  std::function<std::unique_ptr<Backend>()> cpu_backend;
  // CUDA ranks: "auto" (the route the server's workers take: CUDA IPC where ranks share a GPU or
  // reach each other's, NCCL otherwise; worker/comm/cuda_group.h), "ipc" or "nccl" to insist on one;
  // or "host": every rank on GPU gpus[0] (default 0), collectives staged through host memory
  // (worker/comm/host_staged.h), without the decode graph, the sums as IPC's bit for bit.
  std::string cuda_comm = "auto";
  // CUDA ranks' decode kernels with grid-wide barriers (kernels/cuda/cuda_backend.h GridKernels).
  std::string cuda_grid_kernels = "all";
  // Ranks 1.. in processes of their own, forked before this process starts a thread or a GPU (as
  // the server's workers run: CUDA ranks on one GPU must be processes); rank 0 runs in this process,
  // so what fn keeps of rank 0 stays here. Not for in-process CPU groups or host staging.
  bool processes = false;
  ModelOptions model;
};

// Loads rank r's shard and calls fn(model) on every rank concurrently; returns the first error.
absl::Status RunLocalGroup(const ModelConfig& config, const TensorStore& store, int tp,
                           const std::function<absl::Status(Model&)>& fn, const LocalGroupOptions& options = {});
// The same with synthetic weights drawn from `seed` on each rank's backend (weights.h).
absl::Status RunSyntheticGroup(const ModelConfig& config, uint64_t seed, int tp,
                               const std::function<absl::Status(Model&)>& fn, const LocalGroupOptions& options = {});

}  // namespace q38
