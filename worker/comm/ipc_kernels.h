// The device half of the CUDA IPC collectives (worker/comm/cuda_group.h): kernels that read the
// peers' buffers directly, synchronised by sequence flags that each rank writes into its peers'
// memory. Only SM70 features: volatile loads and stores, membar.sys, %globaltimer.
//
// Each rank owns one buffer: a flag region (a word per phase, block and source rank) and two data
// slots, used call by call in turn, so that a rank may fill the next slot while a slow peer still
// reads the last. Every block of a launch pairs with the same block on every peer and reads its
// sequence number from its own counter in this rank's device memory; every call advances all the
// counters, so they advance inside CUDA graph replays and stay equal across ranks, which make the
// same calls.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace q38 {

inline constexpr int kIpcMaxWorld = 8;
inline constexpr int kIpcMaxBlocks = 32;
inline constexpr int kIpcPhases = 2;
// The flag region's size at the head of each rank's buffer; the slots follow it.
inline constexpr size_t kIpcFlagBytes = sizeof(uint32_t) * kIpcPhases * kIpcMaxBlocks * kIpcMaxWorld;

// Why a wait gave up (the error word; the first failure is kept).
enum IpcWaitError : uint32_t { kIpcOk = 0, kIpcTimedOut = 1, kIpcAborted = 2 };

// What a launch needs, as this process sees it.
struct IpcPeers {
  int rank = 0;
  int world = 1;
  char* buffer[kIpcMaxWorld] = {};  // every rank's buffer, mapped into this process
  size_t slot_bytes = 0;
  uint32_t* counters = nullptr;              // this rank's kIpcMaxBlocks sequence counters (device)
  const volatile uint32_t* abort = nullptr;  // host-mapped: nonzero makes every wait give up
  uint32_t* error = nullptr;                 // host-mapped: IpcWaitError of the first wait that gave up
  uint64_t timeout_ns = 0;                   // a wait longer than this gives up
};

// Blocks a collective of `bytes` per rank launches (1..kIpcMaxBlocks).
int IpcBlocks(size_t bytes);

// out ← Σ over ranks of in, n elements of F16 or F32 (n · size ≤ slot_bytes), summed in FP32 in
// rank order and rounded once, so every rank and both algorithms give the same bits. One-shot:
// each rank reads every peer's input. Two-shot: each rank reduces a share and the others read it.
// in and out may be the same; both 16-byte aligned.
cudaError_t IpcAllReduce(const IpcPeers& p, const void* in, void* out, int64_t n, DType dtype, bool two_shot,
                         cudaStream_t stream);

// out[r · stride ..+ bytes) ← rank r's in[0, bytes), for every r (bytes ≤ slot_bytes).
cudaError_t IpcAllGather(const IpcPeers& p, const void* in, void* out, size_t bytes, size_t stride,
                         cudaStream_t stream);

}  // namespace q38
