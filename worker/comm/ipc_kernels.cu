#include "worker/comm/ipc_kernels.h"

#include <cuda_fp16.h>

#include <algorithm>

namespace q38 {
namespace {

constexpr int kThreads = 512;
constexpr size_t kBytesPerBlock = 16 << 10;  // below this, one more block costs more in flags than it gains

__device__ uint32_t* Flag(char* buffer, int phase, int block, int src) {
  return reinterpret_cast<uint32_t*>(buffer) + (phase * kIpcMaxBlocks + block) * kIpcMaxWorld + src;
}

__device__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A peer's 16 bytes as they are now: past L1, which does not see other processes' or GPUs' writes.
__device__ uint4 LoadVolatile(const char* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Tells every rank (this one too) that this block's data for `seq` is in place. The barrier makes
// the block's writes precede the fence, which is cumulative, and the fence precede the flags.
__device__ void Signal(const IpcPeers& p, int phase, uint32_t seq) {
  __syncthreads();
  if (threadIdx.x < p.world) {
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(Flag(p.buffer[threadIdx.x], phase, blockIdx.x, p.rank)) = seq;
  }
}

// Waits until every rank has signalled `seq` for this block and phase; false if a wait gave up
// (timeout or abort: the error word says which) or had given up before.
__device__ bool Await(const IpcPeers& p, int phase, uint32_t seq) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  if (threadIdx.x < p.world) {
    const volatile uint32_t* f = Flag(p.buffer[p.rank], phase, blockIdx.x, threadIdx.x);
    const uint64_t start = GlobalTimer();
    // Sequence numbers wrap; a peer is never more than one ahead or behind.
    for (uint32_t spins = 0; static_cast<int32_t>(*f - seq) < 0; ++spins) {
      if ((spins & 255) != 0) continue;
      uint32_t why = kIpcOk;
      if (*p.abort != 0) why = kIpcAborted;
      else if (GlobalTimer() - start > p.timeout_ns) why = kIpcTimedOut;
      if (why != kIpcOk) {
        atomicCAS(p.error, kIpcOk, why);
        failed = 1;
        break;
      }
    }
    __threadfence_system();
  }
  __syncthreads();
  return failed == 0;
}

// This block's sequence number for the launch: one past the last it finished.
__device__ uint32_t NextSeq(const IpcPeers& p) {
  __shared__ uint32_t seq;
  if (threadIdx.x == 0) seq = p.counters[blockIdx.x] + 1;
  __syncthreads();
  return seq;
}

// Every counter moves on with every call, those of blocks this grid does not have too (block 0
// sets them): all blocks of a call then share one sequence number and so one slot, and slots
// alternate call by call. Per-block counters that moved only with their blocks would let a
// small grid's block 0 refill a slot that a larger grid's block 1 on a peer still reads.
__device__ void Finish(const IpcPeers& p, uint32_t seq) {
  if (threadIdx.x == 0) p.counters[blockIdx.x] = seq;
  if (blockIdx.x == 0 && threadIdx.x >= gridDim.x && threadIdx.x < kIpcMaxBlocks) p.counters[threadIdx.x] = seq;
}

// The block's part of [0, n): whole 16-byte vectors split over the grid; the last block also
// takes the elements past the last whole vector (the tail).
struct Part {
  int64_t begin, end;  // vectors
};
__device__ Part BlockPart(int64_t vectors) {
  return {vectors * blockIdx.x / gridDim.x, vectors * (blockIdx.x + 1) / gridDim.x};
}

__device__ float ToFloat(__half v) { return __half2float(v); }
__device__ float ToFloat(float v) { return v; }
template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ float FromFloat<float>(float v) { return v; }

template <typename T>
struct Lanes {
  static constexpr int kN = 16 / sizeof(T);
};

// Σ over ranks of vector v of `slot`, in rank order from zero, rounded once.
template <typename T>
__device__ uint4 SumVector(const IpcPeers& p, size_t slot, int64_t v) {
  float acc[Lanes<T>::kN] = {};
  for (int r = 0; r < p.world; ++r) {
    const uint4 raw = LoadVolatile(p.buffer[r] + slot + v * 16);
    const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < Lanes<T>::kN; ++i) acc[i] += ToFloat(x[i]);
  }
  uint4 out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int i = 0; i < Lanes<T>::kN; ++i) o[i] = FromFloat<T>(acc[i]);
  return out;
}

// The tail's elements [first, n), reduced by every rank for itself (they are fewer than a vector).
template <typename T>
__device__ void SumTail(const IpcPeers& p, size_t slot, int64_t first, int64_t n, T* out) {
  for (int64_t i = first + threadIdx.x; i < n; i += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < p.world; ++r) {
      acc += ToFloat(*reinterpret_cast<const volatile T*>(p.buffer[r] + slot + i * sizeof(T)));
    }
    out[i] = FromFloat<T>(acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) AllReduceKernel(IpcPeers p, const T* in, T* out, int64_t n, bool two_shot) {
  const uint32_t seq = NextSeq(p);
  const size_t slot = kIpcFlagBytes + (seq & 1) * p.slot_bytes;
  char* mine = p.buffer[p.rank] + slot;
  const int64_t vectors = n / Lanes<T>::kN, tail = vectors * Lanes<T>::kN;
  const Part part = BlockPart(vectors);
  const bool last = blockIdx.x == gridDim.x - 1;
  for (int64_t v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) {
    reinterpret_cast<uint4*>(mine)[v] = reinterpret_cast<const uint4*>(in)[v];
  }
  if (last) {
    for (int64_t i = tail + threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<T*>(mine)[i] = in[i];
  }
  Signal(p, 0, seq);
  if (!Await(p, 0, seq)) return;
  if (!two_shot) {
    for (int64_t v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) {
      reinterpret_cast<uint4*>(out)[v] = SumVector<T>(p, slot, v);
    }
    if (last) SumTail<T>(p, slot, tail, n, out);
    Finish(p, seq);
    return;
  }
  // Two-shot: rank r reduces share r of the block's part into its own slot (no peer reads that
  // share before the second signal), then every rank copies the other shares.
  const int64_t len = part.end - part.begin;
  auto share = [&](int r) { return Part{part.begin + len * r / p.world, part.begin + len * (r + 1) / p.world}; };
  const Part own = share(p.rank);
  for (int64_t v = own.begin + threadIdx.x; v < own.end; v += blockDim.x) {
    const uint4 s = SumVector<T>(p, slot, v);
    reinterpret_cast<uint4*>(mine)[v] = s;
    reinterpret_cast<uint4*>(out)[v] = s;
  }
  if (last) SumTail<T>(p, slot, tail, n, out);
  Signal(p, 1, seq);
  if (!Await(p, 1, seq)) return;
  for (int r = 0; r < p.world; ++r) {
    if (r == p.rank) continue;
    const Part theirs = share(r);
    for (int64_t v = theirs.begin + threadIdx.x; v < theirs.end; v += blockDim.x) {
      reinterpret_cast<uint4*>(out)[v] = LoadVolatile(p.buffer[r] + slot + v * 16);
    }
  }
  Finish(p, seq);
}

__global__ void __launch_bounds__(kThreads) AllGatherKernel(IpcPeers p, const char* in, char* out, size_t bytes, size_t stride) {
  const uint32_t seq = NextSeq(p);
  const size_t slot = kIpcFlagBytes + (seq & 1) * p.slot_bytes;
  char* mine = p.buffer[p.rank] + slot;
  const int64_t vectors = bytes / 16, tail = vectors * 16;
  const Part part = BlockPart(vectors);
  const bool last = blockIdx.x == gridDim.x - 1;
  if (reinterpret_cast<uintptr_t>(in) % 16 == 0) {
    for (int64_t v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) {
      reinterpret_cast<uint4*>(mine)[v] = reinterpret_cast<const uint4*>(in)[v];
    }
  } else {
    for (int64_t i = part.begin * 16 + threadIdx.x; i < part.end * 16; i += blockDim.x) mine[i] = in[i];
  }
  if (last) {
    for (int64_t i = tail + threadIdx.x; i < static_cast<int64_t>(bytes); i += blockDim.x) mine[i] = in[i];
  }
  Signal(p, 0, seq);
  if (!Await(p, 0, seq)) return;
  for (int r = 0; r < p.world; ++r) {
    char* dst = out + r * stride;
    const char* src = p.buffer[r] + slot;
    // 16-byte stores only where rank r's part of out is aligned.
    if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
      for (int64_t v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) {
        reinterpret_cast<uint4*>(dst)[v] = LoadVolatile(src + v * 16);
      }
    } else {
      for (int64_t i = part.begin * 16 + threadIdx.x; i < part.end * 16; i += blockDim.x) {
        dst[i] = *reinterpret_cast<const volatile char*>(src + i);
      }
    }
    if (last) {
      for (int64_t i = tail + threadIdx.x; i < static_cast<int64_t>(bytes); i += blockDim.x) {
        dst[i] = *reinterpret_cast<const volatile char*>(src + i);
      }
    }
  }
  Finish(p, seq);
}

}  // namespace

int IpcBlocks(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((bytes + kBytesPerBlock - 1) / kBytesPerBlock, 1, kIpcMaxBlocks));
}

cudaError_t IpcAllReduce(const IpcPeers& p, const void* in, void* out, int64_t n, DType dtype, bool two_shot,
                         cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes > p.slot_bytes || (reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int blocks = IpcBlocks(bytes);
  if (dtype == DType::kF16) {
    AllReduceKernel<__half><<<blocks, kThreads, 0, stream>>>(p, static_cast<const __half*>(in), static_cast<__half*>(out), n,
                                                             two_shot);
  } else if (dtype == DType::kF32) {
    AllReduceKernel<float><<<blocks, kThreads, 0, stream>>>(p, static_cast<const float*>(in), static_cast<float*>(out), n,
                                                            two_shot);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t IpcAllGather(const IpcPeers& p, const void* in, void* out, size_t bytes, size_t stride,
                         cudaStream_t stream) {
  if (bytes > p.slot_bytes) return cudaErrorInvalidValue;
  AllGatherKernel<<<IpcBlocks(bytes), kThreads, 0, stream>>>(p, static_cast<const char*>(in), static_cast<char*>(out),
                                                             bytes, stride);
  return cudaGetLastError();
}

}  // namespace q38
