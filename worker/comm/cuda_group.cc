#include "worker/comm/cuda_group.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/comm/ipc_kernels.h"
#include "worker/comm/nccl.h"
#include "worker/comm/peer_process.h"

namespace q38 {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Cuda(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cuda group: ", what, ": ", cudaGetErrorString(e)));
}

// What each rank tells the others at connect.
struct RankCard {
  int32_t pid = 0;
  char uuid[16] = {};
  cudaIpcMemHandle_t handle = {};
  uint64_t buffer = 0;  // the buffer's address in its own process (threads of one process use it)
};

bool SameGpu(const RankCard& a, const RankCard& b) { return std::memcmp(a.uuid, b.uuid, sizeof(a.uuid)) == 0; }

// This process's ordinal of the GPU with `uuid`, or -1.
int OrdinalOf(const char* uuid) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return -1;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess && std::memcmp(p.uuid.bytes, uuid, 16) == 0) return d;
  }
  return -1;
}

// This rank's memory for the IPC route: its buffer (flags and two slots), the blocks' sequence
// counters, and two host-mapped words (abort, error) that the host and the kernels share.
struct IpcMemory {
  char* buffer = nullptr;
  uint32_t* counters = nullptr;
  uint32_t* words = nullptr;  // host pointer; [0] abort, [1] error
  std::vector<void*> opened;  // peers' buffers opened from their handles

  ~IpcMemory() {
    for (void* p : opened) cudaIpcCloseMemHandle(p);
    cudaFree(buffer);
    cudaFree(counters);
    cudaFreeHost(words);
  }
  absl::Status Allocate(size_t slot_bytes) {
    const size_t bytes = kIpcFlagBytes + 2 * slot_bytes;
    RETURN_IF_ERROR(Cuda(cudaMalloc(&buffer, bytes), "allocate the IPC buffer"));
    RETURN_IF_ERROR(Cuda(cudaMemset(buffer, 0, kIpcFlagBytes), "clear the flags"));
    RETURN_IF_ERROR(Cuda(cudaMalloc(&counters, kIpcMaxBlocks * sizeof(uint32_t)), "allocate the counters"));
    RETURN_IF_ERROR(Cuda(cudaMemset(counters, 0, kIpcMaxBlocks * sizeof(uint32_t)), "clear the counters"));
    RETURN_IF_ERROR(Cuda(cudaHostAlloc(&words, 2 * sizeof(uint32_t), cudaHostAllocMapped), "allocate the abort word"));
    words[0] = words[1] = 0;
    return Cuda(cudaDeviceSynchronize(), "clear the IPC buffer");
  }
};

const char* WaitErrorName(uint32_t e) {
  return e == kIpcTimedOut ? "a wait for a peer timed out" : "a wait for a peer was aborted";
}

class CudaGroupCommunicator final : public Communicator {
 public:
  CudaGroupCommunicator(std::unique_ptr<Communicator> host, const CudaGroupOptions& o, int device)
      : host_(std::move(host)), o_(o), device_(device) {}
  ~CudaGroupCommunicator() override {
    if (ipc_ != nullptr) {
      // No kernel of ours may still wait on a peer that will never come: let every wait go, then
      // drain the stream before the buffers go.
      Volatile(0) = 1;
      cudaStreamSynchronize(o_.stream);
    }
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string version() const override { return version_; }

  absl::Status AllReduceSum(Tensor& t) override {
    RETURN_IF_ERROR(Usable());
    if (ipc_ == nullptr || (nccl_ != nullptr && t.nbytes() > o_.ipc_max_bytes)) return nccl_->AllReduceSum(t);
    if (t.dtype != DType::kF16 && t.dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("ipc all-reduce: no sum on ", std::string(DTypeName(t.dtype))));
    }
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return absl::InvalidArgumentError("ipc all-reduce: a tensor not 16-byte aligned");
    const size_t item = DTypeSize(t.dtype);
    const int64_t per_round = static_cast<int64_t>(o_.slot_bytes / item), n = t.numel();
    for (int64_t first = 0; first < n; first += per_round) {
      const int64_t count = std::min(per_round, n - first);
      char* at = static_cast<char*>(t.data) + first * item;
      RETURN_IF_ERROR(Launched(IpcAllReduce(peers_, at, at, count, t.dtype, count * item >= o_.two_shot_bytes,
                                            o_.stream),
                               "all-reduce"));
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(const Tensor& in, Tensor& out) override {
    RETURN_IF_ERROR(Usable());
    if (out.numel() != in.numel() * size() || out.dtype != in.dtype) {
      return absl::InvalidArgumentError("all-gather: output is not world × input");
    }
    if (ipc_ == nullptr || (nccl_ != nullptr && in.nbytes() > o_.ipc_max_bytes)) return nccl_->AllGather(in, out);
    const size_t bytes = in.nbytes();
    for (size_t first = 0; first < bytes; first += o_.slot_bytes) {
      const size_t count = std::min(o_.slot_bytes, bytes - first);
      RETURN_IF_ERROR(Launched(IpcAllGather(peers_, static_cast<const char*>(in.data) + first,
                                            static_cast<char*>(out.data) + first, count, bytes, o_.stream),
                               "all-gather"));
    }
    return Wait("all-gather");
  }

  absl::Status Broadcast(void* data, size_t n, int root) override {
    RETURN_IF_ERROR(Usable());
    absl::Status s = host_->Broadcast(data, n, root);
    // A peer gone from the host group may have left this rank's stream waiting on it.
    if (!s.ok() && ipc_ != nullptr) return Abort(std::move(s));
    return s;
  }

  // Connects the routes `route` names, taken for `why`; cards are every rank's, this one's with
  // its buffer.
  absl::Status Join(const std::string& route, const std::string& why, const std::vector<RankCard>& cards,
                    std::unique_ptr<IpcMemory> memory) {
    if (route != "nccl") {
      IpcPeers& p = peers_;
      p.rank = rank();
      p.world = size();
      p.slot_bytes = o_.slot_bytes;
      p.counters = memory->counters;
      uint32_t* device_words = nullptr;
      RETURN_IF_ERROR(Cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_words), memory->words, 0),
                           "map the abort word"));
      p.abort = device_words;
      p.error = device_words + 1;
      p.timeout_ns = static_cast<uint64_t>(o_.timeout_ms) * 1'000'000;
      for (int r = 0; r < size(); ++r) {
        pids_.push_back(cards[r].pid);
        if (r == rank()) {
          p.buffer[r] = memory->buffer;
        } else if (cards[r].pid == getpid()) {
          // A thread of this process: its address serves as it is, once this GPU may reach its GPU.
          if (const int other = OrdinalOf(cards[r].uuid); other != device_) {
            const cudaError_t e = cudaDeviceEnablePeerAccess(other, 0);
            if (e != cudaErrorPeerAccessAlreadyEnabled) RETURN_IF_ERROR(Cuda(e, "enable peer access"));
            cudaGetLastError();  // the already-enabled error is not this rank's failure
          }
          p.buffer[r] = reinterpret_cast<char*>(cards[r].buffer);
        } else {
          void* mapped = nullptr;
          RETURN_IF_ERROR(Cuda(cudaIpcOpenMemHandle(&mapped, cards[r].handle, cudaIpcMemLazyEnablePeerAccess),
                               absl::StrCat("open rank ", r, "'s buffer")));
          memory->opened.push_back(mapped);
          p.buffer[r] = static_cast<char*>(mapped);
        }
      }
      ipc_ = std::move(memory);
    }
    if (route != "ipc") {
      ASSIGN_OR_RETURN(nccl_, ConnectNccl({.rank = rank(), .size = size(), .store_dir = o_.store_dir,
                                           .prefix = o_.prefix, .timeout_ms = o_.timeout_ms, .stream = o_.stream}));
    }
    const std::string nccl = nccl_ != nullptr ? nccl_->version() : "";
    version_ = route == "nccl"  ? absl::StrCat(nccl, " (", why, ")")
               : route == "ipc" ? absl::StrCat("cuda-ipc, host ", host_->version(), " (", why, ")")
                                : absl::StrCat("cuda-ipc+", nccl, " (", why, ")");
    return absl::OkStatus();
  }

 private:
  volatile uint32_t& Volatile(int word) { return reinterpret_cast<volatile uint32_t*>(ipc_->words)[word]; }

  absl::Status Usable() {
    if (!failed_.ok()) return failed_;
    if (ipc_ != nullptr && Volatile(1) != kIpcOk) {
      return Abort(absl::UnavailableError(absl::StrCat("ipc: ", WaitErrorName(Volatile(1)))));
    }
    return absl::OkStatus();
  }
  absl::Status Launched(cudaError_t e, absl::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return Abort(absl::UnavailableError(absl::StrCat("ipc ", what, ": ", cudaGetErrorString(e))));
  }

  // Polls the stream until the queued work is done, a kernel's wait gives up, a peer's process is
  // gone or the deadline passes; all but the first abort the group.
  absl::Status Wait(absl::string_view what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.timeout_ms);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(o_.stream);
      if (Volatile(1) != kIpcOk) {
        return Abort(absl::UnavailableError(absl::StrCat("ipc ", what, ": ", WaitErrorName(Volatile(1)))));
      }
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return Abort(absl::UnavailableError(absl::StrCat("ipc ", what, ": ", cudaGetErrorString(q))));
      for (int r = 0; r < size(); ++r) {
        if (pids_[r] != getpid() && ProcessGone(pids_[r])) {
          return Abort(absl::UnavailableError(absl::StrCat("ipc ", what, ": rank ", r, " (pid ", pids_[r], ") exited")));
        }
      }
      if (Clock::now() > deadline) {
        return Abort(absl::UnavailableError(absl::StrCat("ipc ", what, ": no progress within ", o_.timeout_ms,
                                                         " ms (a peer is gone?)")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Lets every kernel of ours that waits on a peer go, waits for the stream to drain, and fails
  // this and every later collective.
  absl::Status Abort(absl::Status why) {
    if (ipc_ != nullptr) Volatile(0) = 1;
    cudaStreamSynchronize(o_.stream);
    failed_ = why;
    return why;
  }

  std::unique_ptr<Communicator> host_;
  CudaGroupOptions o_;
  int device_;
  std::unique_ptr<Communicator> nccl_;
  std::unique_ptr<IpcMemory> ipc_;
  IpcPeers peers_;
  std::vector<int32_t> pids_;
  std::string version_;
  absl::Status failed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectCudaGroup(std::unique_ptr<Communicator> host,
                                                               const CudaGroupOptions& o) {
  if (o.route != "auto" && o.route != "nccl" && o.route != "ipc") {
    return absl::InvalidArgumentError("cuda group: route must be auto, nccl or ipc, got " + o.route);
  }
  const int world = host->size(), rank = host->rank();
  if (o.route != "nccl" && world > kIpcMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat("cuda group: IPC joins at most ", kIpcMaxWorld, " ranks"));
  }
  if (o.slot_bytes == 0 || o.slot_bytes % 16 != 0) return absl::InvalidArgumentError("cuda group: slot_bytes must be a positive multiple of 16");
  int device = 0;
  cudaDeviceProp props;
  RETURN_IF_ERROR(Cuda(cudaGetDevice(&device), "current device"));
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&props, device), "device properties"));
  auto memory = std::make_unique<IpcMemory>();
  std::vector<RankCard> cards(world);
  RankCard& mine = cards[rank];
  mine.pid = getpid();
  std::memcpy(mine.uuid, props.uuid.bytes, sizeof(mine.uuid));
  if (o.route != "nccl") {
    RETURN_IF_ERROR(memory->Allocate(o.slot_bytes));
    RETURN_IF_ERROR(Cuda(cudaIpcGetMemHandle(&mine.handle, memory->buffer), "export the IPC buffer"));
    mine.buffer = reinterpret_cast<uint64_t>(memory->buffer);
  }
  for (int r = 0; r < world; ++r) RETURN_IF_ERROR(host->Broadcast(&cards[r], sizeof(RankCard), r));

  // Whether this rank reaches every peer's GPU; then whether every rank does.
  bool shared = false, reach = true, shared_context = false;
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < r; ++q) {
      shared = shared || SameGpu(cards[r], cards[q]);
      shared_context = shared_context || (SameGpu(cards[r], cards[q]) && cards[r].pid == cards[q].pid);
    }
    if (r == rank || SameGpu(cards[r], mine)) continue;
    const int other = OrdinalOf(cards[r].uuid);
    int can = 0;
    reach = reach && other >= 0 && cudaDeviceCanAccessPeer(&can, device, other) == cudaSuccess && can == 1;
  }
  std::vector<float> unreached = {reach ? 0.0f : 1.0f};
  Tensor count{unreached.data(), DType::kF32, {1}};
  RETURN_IF_ERROR(host->AllReduceSum(count));
  const bool all_reach = unreached[0] == 0.0f;

  std::string route, why;
  if (shared_context && o.route != "nccl" && !o.threads_share_gpu) {
    return absl::FailedPreconditionError(
        "cuda group: ranks that are threads of one process on one GPU would stall each other's collectives "
        "(a device-wide synchronization in one waits for the other's); run them as processes, or stage through the host");
  }
  if (o.route == "nccl") {
    if (shared) return absl::FailedPreconditionError("cuda group: route nccl, but ranks share a GPU, which NCCL refuses");
    route = "nccl", why = "asked for";
  } else if (!all_reach) {
    if (shared || o.route == "ipc") {
      return absl::FailedPreconditionError(
          "cuda group: some ranks' GPUs have no peer access to others', so IPC cannot join them (and NCCL refuses ranks "
          "that share a GPU)");
    }
    route = "nccl", why = "GPUs without peer access";
  } else if (shared || o.route == "ipc") {
    route = "ipc", why = shared ? "ranks share a GPU, which NCCL refuses" : "asked for";
  } else {
    route = "ipc+nccl", why = absl::StrCat("peer access between every GPU: IPC up to ", o.ipc_max_bytes, " bytes");
  }
  if (route == "nccl") memory.reset();

  auto comm = std::make_unique<CudaGroupCommunicator>(std::move(host), o, device);
  RETURN_IF_ERROR(comm->Join(route, why, cards, std::move(memory)));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace q38
