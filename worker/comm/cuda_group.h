// The collectives of a group of CUDA ranks, by the route their GPUs allow:
//   ipc       every rank's GPU reaches every other's memory and some ranks share a GPU (NCCL
//             refuses two ranks on one GPU): every collective through CUDA IPC peer buffers
//             (ipc_kernels.h), in pieces of a slot where a message is larger.
//   ipc+nccl  one rank a GPU, every pair with peer access (NVLink V100 boards): IPC up to
//             `ipc_max_bytes`, where its one kernel beats NCCL's latency, NCCL above.
//   nccl      GPUs without peer access: NCCL alone (nccl.h).
// Every rank learns every other's GPU, process and buffer through `host`, a host group of the same
// ranks (shared memory between processes, or the in-process group for threads of one process),
// and all take the same route. Host broadcasts go through `host` too.
//
// IPC collectives are kernels on the backend's stream, recordable into the decode graph. Their
// waits give up after the group's timeout, or at once when a waiting point on the host (the
// all-gather, a broadcast) finds a peer's process gone or its deadline passed and raises the
// abort word; the collective then fails with UNAVAILABLE, and so does every later one.
#pragma once

#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace q38 {

struct CudaGroupOptions {
  std::string store_dir;  // NCCL's rendezvous, where it is used
  std::string prefix = "q38";
  int timeout_ms = 30000;
  cudaStream_t stream = nullptr;  // the backend's; the current device must be the rank's GPU
  std::string route = "auto";     // auto | nccl | ipc
  size_t slot_bytes = size_t{8} << 20;
  // ipc+nccl: NCCL above this. A starting point, not a measurement: comparing IPC with NCCL
  // needs a GPU per rank (comm_bench does it where it finds them).
  size_t ipc_max_bytes = size_t{1} << 20;
  // IPC all-reduces from this size on reduce a share each (two-shot). Off: on one GPU one-shot is
  // faster at every size from 1 KB to 16 MB (worker/comm/comm_bench.cc, docs/perf/collectives.md);
  // where two-shot pays across GPUs is for the bench on a machine with several.
  size_t two_shot_bytes = std::numeric_limits<size_t>::max();
  // Threads of one process on one GPU share its context, so a device-wide synchronization in one
  // (cudaFree, say) waits for another's collective, which waits for the first: they are refused
  // unless the caller (the tests, the bench) keeps such calls out of the time a collective may wait.
  bool threads_share_gpu = false;
};

// `host`: this rank's member of a host group of the same ranks.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectCudaGroup(std::unique_ptr<Communicator> host,
                                                               const CudaGroupOptions& options);

}  // namespace q38
