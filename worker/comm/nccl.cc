#include "worker/comm/nccl.h"

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace q38 {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status NcclStatus(ncclResult_t r, absl::string_view what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("nccl ", what, ": ", ncclGetErrorString(r)));
}

absl::StatusOr<ncclDataType_t> NcclType(DType d) {
  switch (d) {
    case DType::kF16:
      return ncclHalf;
    case DType::kF32:
      return ncclFloat;
    default:
      return absl::InvalidArgumentError(absl::StrCat("nccl: no collective on ", std::string(DTypeName(d))));
  }
}

// Rank 0 publishes the group's unique id; the others wait for it.
absl::StatusOr<ncclUniqueId> ExchangeId(const NcclOptions& o) {
  const std::filesystem::path path = std::filesystem::path(o.store_dir) / (o.prefix + ".nccl-id");
  ncclUniqueId id;
  if (o.rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "get unique id"));
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(id.internal, sizeof(id.internal));
      if (!f) return absl::UnavailableError(absl::StrCat("nccl: cannot write ", tmp.string()));
    }
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  while (Clock::now() < deadline) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id.internal, sizeof(id.internal))) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("nccl: rank 0 did not publish ", path.string(), " within ",
                                                  o.timeout_ms, " ms"));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, const NcclOptions& o) : comm_(comm), o_(o) {
    cudaMalloc(&bounce_, kBounceBytes);
  }
  // Finalize flushes this rank's outstanding work with its peers; a peer that is gone makes it
  // time out, and then the communicator is aborted instead.
  ~NcclCommunicator() override {
    if (comm_ != nullptr && Settled(ncclCommFinalize(comm_), "finalize").ok()) ncclCommDestroy(comm_);
    cudaFree(bounce_);
  }
  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }
  std::string version() const override {
    int v = 0;
    ncclGetVersion(&v);
    return absl::StrCat("nccl-", v / 10000, ".", (v / 100) % 100, ".", v % 100);
  }

  absl::Status AllReduceSum(Tensor& t) override {
    RETURN_IF_ERROR(Usable());
    ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t.dtype));
    return Settled(ncclAllReduce(t.data, t.data, t.numel(), type, ncclSum, comm_, o_.stream), "all-reduce");
  }
  absl::Status AllGather(const Tensor& in, Tensor& out) override {
    RETURN_IF_ERROR(Usable());
    ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(in.dtype));
    if (out.numel() != in.numel() * o_.size || out.dtype != in.dtype) {
      return absl::InvalidArgumentError("all-gather: output is not world × input");
    }
    RETURN_IF_ERROR(Settled(ncclAllGather(in.data, out.data, in.numel(), type, comm_, o_.stream), "all-gather"));
    return Wait("all-gather");
  }
  absl::Status Broadcast(void* data, size_t n, int root) override {
    RETURN_IF_ERROR(Usable());
    if (n > kBounceBytes) return absl::InvalidArgumentError(absl::StrCat("nccl broadcast of ", n, " bytes"));
    if (cudaMemcpyAsync(bounce_, data, n, cudaMemcpyHostToDevice, o_.stream) != cudaSuccess) {
      return absl::UnavailableError("nccl broadcast: could not stage the bytes");
    }
    RETURN_IF_ERROR(Settled(ncclBroadcast(bounce_, bounce_, n, ncclUint8, root, comm_, o_.stream), "broadcast"));
    if (cudaMemcpyAsync(data, bounce_, n, cudaMemcpyDeviceToHost, o_.stream) != cudaSuccess) {
      return absl::UnavailableError("nccl broadcast: could not fetch the bytes");
    }
    return Wait("broadcast");
  }

 private:
  static constexpr size_t kBounceBytes = 4096;

  absl::Status Usable() const {
    if (comm_ == nullptr) return absl::UnavailableError("nccl: the communicator was aborted after an earlier failure");
    return absl::OkStatus();
  }

  // A non-blocking communicator may still be setting up a call when it returns (ncclInProgress);
  // the next call must wait for that.
  absl::Status Settled(ncclResult_t r, absl::string_view what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.timeout_ms);
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) return Abort(absl::StrCat("nccl ", what, ": still in progress after ", o_.timeout_ms, " ms"));
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) return Abort(absl::StrCat("nccl ", what, ": ", ncclGetErrorString(r)));
    return absl::OkStatus();
  }

  // Polls the stream until the queued work is done, a peer reports an error, or the deadline
  // passes; on the last two the communicator is aborted so that nothing waits on it again.
  absl::Status Wait(absl::string_view what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.timeout_ms);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(o_.stream);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return Abort(absl::StrCat("nccl ", what, ": ", cudaGetErrorString(q)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Abort(absl::StrCat("nccl ", what, ": ", ncclGetErrorString(async)));
      }
      if (Clock::now() > deadline) {
        return Abort(absl::StrCat("nccl ", what, ": no progress within ", o_.timeout_ms, " ms (a peer is gone?)"));
      }
      std::this_thread::yield();
    }
  }
  absl::Status Abort(std::string message) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    return absl::UnavailableError(std::move(message));
  }

  ncclComm_t comm_;
  NcclOptions o_;
  void* bounce_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: rank ", o.rank, " outside a group of ", o.size));
  }
  ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeId(o));
  // Non-blocking init, so that a missing peer is a deadline rather than a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  RETURN_IF_ERROR(NcclStatus(ncclCommInitRankConfig(&comm, o.size, id, o.rank, &config), "init"));
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress || Clock::now() > deadline) {
      ncclCommAbort(comm);
      return state != ncclInProgress ? NcclStatus(state, "init")
                                     : absl::DeadlineExceededError(absl::StrCat("nccl init: the group of ", o.size,
                                                                                " did not form within ", o.timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(comm, o));
}

}  // namespace q38
