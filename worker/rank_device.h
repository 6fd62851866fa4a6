// What one rank runs on: its backend and the communicator that joins it to the other ranks.
// CPU ranks use the CPU backend with shared memory or Gloo over TCP; CUDA ranks use a GPU each (or
// share one) with CUDA IPC or NCCL, by the route the GPUs allow (worker/comm/cuda_group.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"
#include "worker/manifest.h"

namespace q38 {

struct RankDeviceOptions {
  int rank = 0;
  int world = 1;
  std::string device = "cpu";  // cpu | cuda
  int gpu = 0;                 // with cuda: the GPU ordinal this rank uses
  std::string rendezvous;      // directory of the communicators' file store
  std::string group = "q38";
  int timeout_ms = 10000;
  std::string cpu_comm = "shm";  // CPU ranks: shm (shared memory, one host) or gloo (TCP)
  std::string cuda_comm = "auto";  // CUDA ranks: auto (by the GPUs), ipc or nccl
  std::string cuda_grid_kernels = "all";  // CUDA ranks: the decode grid kernels (kernels/cuda/cuda_backend.h)
  CpuMath cpu_math = CpuMath::kFast;
  int cpu_threads = 0;  // threads of the fast CPU backend; 0: this host's cores shared out over the world
};

struct RankDevice {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
  std::string description;  // "cpu", or "cuda:<ordinal> <name> <uuid>"
  BackendManifest manifest;  // device identity, dtypes and routes (graph mode is the model's)
};

absl::StatusOr<RankDevice> OpenRankDevice(const RankDeviceOptions& options);

// The CUDA half, in rank_device_cuda.cc, or an error where the build has no CUDA backend.
absl::StatusOr<RankDevice> OpenCudaRank(const RankDeviceOptions& options);

// For ranks of one process that share a GPU (worker/comm/host_staged.h): a communicator that
// joins a CUDA rank through `host`, its member of a host group, on the backend's stream.
absl::StatusOr<std::unique_ptr<Communicator>> StageThroughHost(Backend& backend, std::unique_ptr<Communicator> host);

}  // namespace q38
