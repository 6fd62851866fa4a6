// Collectives between the ranks of one tensor-parallel group. The model needs two: a sum
// all-reduce after each row-parallel projection, and an all-gather for the vocab-split logits.
// Implementations: in-process threads (tests), Gloo over TCP (CPU workers), NCCL (GPU workers),
// and CUDA ranks sharing one GPU through host memory (tests; host_staged.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace q38 {

// Host F32 views of collective arguments, checked, for the CPU groups.
absl::StatusOr<float*> HostF32(const Tensor& t);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A short name with the version, for manifests ("gloo-0.5.0", "inprocess").
  virtual std::string version() const = 0;
  // Tensors live where the group's backend keeps activations: host F32 for the in-process and
  // Gloo groups, device memory for NCCL, whose collectives are queued behind the backend's work.
  // t ← Σ over ranks, identically summed on every rank.
  virtual absl::Status AllReduceSum(Tensor& t) = 0;
  // out [world, in...] ← every rank's in, in rank order.
  virtual absl::Status AllGather(const Tensor& in, Tensor& out) = 0;
  // bytes [0..n) of root's host data to every rank; returns once they have arrived.
  virtual absl::Status Broadcast(void* data, size_t n, int root) = 0;
};

// A single rank: every collective is the identity.
std::unique_ptr<Communicator> MakeSoloCommunicator();

// `world` communicators for threads of one process, one per rank; each must be used from its own
// thread. Reductions add in rank order so every rank gets bitwise the same sum.
std::vector<std::unique_ptr<Communicator>> MakeInProcessGroup(int world);

}  // namespace q38

namespace q38 {

// Gloo over TCP for CPU worker processes. The rendezvous is a directory every rank can reach (a
// file store); `prefix` keeps separate groups in one directory apart. Every collective, and the
// rendezvous itself, fails with DEADLINE_EXCEEDED or UNAVAILABLE rather than hanging. Connecting
// sets SIGPIPE to ignored for the process, so a dead peer is an error, not a signal.
struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string store_dir;
  std::string prefix = "q38";
  std::string hostname = "127.0.0.1";
  int timeout_ms = 30000;
};
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GlooOptions& options);

}  // namespace q38

namespace q38 {

// Shared memory for CPU worker processes of one host: one segment, a file in `store_dir` that rank 0
// creates and every rank maps (unlinked once all have joined), a slot per rank and a futex to
// sleep on, so that waiting ranks leave the cores to the ranks still computing. Dead peers
// (UNAVAILABLE) and timeouts (DEADLINE_EXCEEDED) fail the collective; a rank on another host is
// refused at connect. Messages larger than a slot go in slot-sized rounds. Sums add in rank order,
// bitwise as the in-process group does.
struct ShmOptions {
  int rank = 0;
  int size = 1;
  std::string store_dir;
  std::string prefix = "q38";
  int timeout_ms = 30000;
  size_t slot_bytes = 1 << 20;
  std::string host;  // this rank's host as it tells rank 0 (empty: gethostname; tests set it)
};
absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(const ShmOptions& options);

}  // namespace q38
