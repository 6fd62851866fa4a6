// NCCL for GPU workers: one communicator across the group's processes, one GPU each. Its
// collectives run on the CUDA backend's stream, behind the work that produced their inputs, and
// can be recorded into the decode graph. The unique id travels through a file in the rendezvous
// directory. Waiting points (the host broadcast, the logits gather) poll with a deadline and
// abort the communicator when a peer stops answering, so a dead rank fails the request instead
// of hanging this one.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace q38 {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  std::string store_dir;
  std::string prefix = "q38";
  int timeout_ms = 30000;
  cudaStream_t stream = nullptr;  // the backend's; the current device must be the rank's GPU
};

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclOptions& options);

}  // namespace q38
