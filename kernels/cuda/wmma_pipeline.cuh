// The pipelined tensor-core block tile of prefill's GEMMs (the dense GEMM and the grouped expert
// GEMM): C[BM × BN] = A[BM × K] · B[BN × K]ᵀ in FP32 by WMMA 16×16×16, the way Volta GEMMs feed
// the tensor cores without cp.async or ldmatrix. Each k-step of kBK columns, every thread first
// issues its global loads of the next step into registers, then the warps multiply the current
// step from shared memory, then the registers go to the other of two shared buffers: one barrier
// a step, and the next step's loads in flight during this step's math (or, with kAhead = 2, the
// loads of the step after next, in a second set of registers). Shared rows are padded by
// 16 bytes (80 bytes at kBK = 32, 144 at 64), so that the fragment loads (8 rows of 16 bytes a
// phase) touch 32 distinct banks. The buffers live in dynamic shared memory (DynamicShared), so a
// tile may take more than the 48 KB of static shared memory (AllowShared: up to SM70's 96 KB).
// After the last step the operand buffers hold each warp's 16 × 32 slices of C in turn for the
// epilogue, which the caller supplies (its activation, gate or scale applied once, in FP32).
#pragma once

#include <mma.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {

// A block tile of kBM × kBN by kWarpsM × kWarpsN warps, each warp a (kBM / kWarpsM) ×
// (kBN / kWarpsN) grid of 16×16 accumulator fragments, kBK columns of K a step, global loads
// issued kAhead steps before the step that multiplies them (1, or 2 with a second set of registers).
template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kBK_ = 32, int kAhead_ = 1>
struct TileShape {
  static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kBK = kBK_;         // K columns a step
  static constexpr int kAhead = kAhead_;   // steps between a run's load and its products
  static constexpr int kLd = kBK + 8;      // halves a shared row: 16 bytes of padding
  static constexpr int kThreads = kWarpsM * kWarpsN * kWarp;
  static constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;
  static constexpr int kFM = kWM / 16, kFN = kWN / 16;
  static constexpr int kOutLd = 2 * 16 + 4;  // floats a row of an epilogue slice (16 × 32)
  static constexpr int kOperandBytes = 2 * (kBM + kBN) * kLd * 2;
  static constexpr int kOutBytes = kWarpsM * kWarpsN * 16 * kOutLd * 4;
  static constexpr int kSharedBytes = kOperandBytes > kOutBytes ? kOperandBytes : kOutBytes;
  static_assert(kBK == 32 || kBK == 64, "steps of 32 or 64 columns");
  static_assert(kAhead == 1 || kAhead == 2, "loads one or two steps ahead");
  static_assert(kWM % 16 == 0 && kWN % 32 == 0, "warp tiles of whole fragments, columns in pairs");
  static_assert(kSharedBytes <= 96 * 1024, "SM70's shared memory a block");
};

// The block's dynamic shared memory (the kernel's launch gives its size).
__device__ __forceinline__ unsigned char* DynamicShared() {
  extern __shared__ __align__(128) unsigned char dynamic_shared[];
  return dynamic_shared;
}

// Lets `kernel` launch with Shape::kSharedBytes of dynamic shared memory: past 48 KB a kernel
// must opt in, on each device (cheap and outside any stream, so it may run at every launch).
template <typename Shape, typename Kernel>
void AllowShared(Kernel kernel) {
  if constexpr (Shape::kSharedBytes > 48 * 1024) {
    Q38_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSharedBytes));
  }
}

// The block's shared memory (Shape::kSharedBytes at `raw`, 128-byte aligned): the two operand
// buffers, or the warps' epilogue slices after the loop.
template <typename Shape>
struct PipelineShared {
  unsigned char* raw;
  __device__ __half* A(int stage, int row) const {
    return reinterpret_cast<__half*>(raw) + (stage * Shape::kBM + row) * Shape::kLd;
  }
  __device__ __half* B(int stage, int row) const {
    return reinterpret_cast<__half*>(raw) + (2 * Shape::kBM + stage * Shape::kBN + row) * Shape::kLd;
  }
  __device__ float* Out(int warp) const { return reinterpret_cast<float*>(raw) + warp * 16 * Shape::kOutLd; }
};

// An operand as the pipeline reads it: a `Run` is what a thread holds in registers for
// Run::kHalves (8 or 16) consecutive halves of one tile row (raw as loaded: FP16, or codes and a
// block scale). A thread moves the same rows of the tile at every step, at one column of the
// step, kBK columns further on each time (RunLayout); so a side resolves each row once a tile:
// At(row) gives an int cursor (where the row starts), Fetch(cursor, k, in_k) loads the run at
// column k of that row, zeros where in_k (k < K) is false (a side may bound each element
// itself), and Stash(run, dst) writes its halves to 16-byte aligned shared memory. A tile row
// past the operand's rows may read any of its rows: the epilogue drops what it computes. (The
// addresses and bounds of every run recomputed in 64 bits at each step were half of the loop's
// instructions.)
//
// FP16 rows at `base`: the cursor is a row's offset in halves (below 2³¹).
struct HalfRun {
  static constexpr int kHalves = 8;
  uint4 v;
};
__device__ __forceinline__ HalfRun FetchHalfRun(const __half* base, int row, int k, bool in_k) {
  return {in_k ? __ldg(reinterpret_cast<const uint4*>(base + static_cast<uint32_t>(row + k))) : make_uint4(0, 0, 0, 0)};
}
__device__ __forceinline__ void StashHalfRun(const HalfRun& r, __half* dst) { *reinterpret_cast<uint4*>(dst) = r.v; }

// Which of A's rows a tile computes. AllRows: every one (the dense GEMM, whose epilogue skips the
// rows past T; a branch around the step's products, even a uniform one, cost its schedule an
// eighth: run N2). FirstRows: the first n (a ragged expert tile): a
// warp whose rows all lie past them skips its products, and no slice of rows past them goes to
// the epilogue. (Skipping single fragment rows inside the step's loop cost a fifth: run N1.)
struct AllRows {
  __device__ static constexpr bool Has(int) { return true; }
};
struct FirstRows {
  int n;
  __device__ bool Has(int row) const { return row < n; }
};

// Where a thread's runs of one operand (kRows rows of the tile, kHalves-half runs) lie in a step:
// kPerRow threads read a row's 2·kBK bytes, and run i of a thread is row row0 + i · kPass, all at
// one column.
template <typename Shape, int kRows, int kHalves>
struct RunLayout {
  static constexpr int kPerRow = Shape::kBK / kHalves, kPass = Shape::kThreads / kPerRow;
  static constexpr int kRuns = kRows / kPass;
  static_assert(Shape::kThreads % kPerRow == 0 && kRows % kPass == 0, "every thread moves whole runs");
  int row0, col;
  __device__ explicit RunLayout(int tid) : row0(tid / kPerRow), col((tid % kPerRow) * kHalves) {}
};

// Runs the tile over K (below 2³¹; a multiple of a side's run where its Fetch reads whole runs:
// in_k only says where a run starts). a and b as above, rows within the tile.
// Then, for each warp's fragment row i and fragment column pair (j, j + 1), the slice of 16 rows
// × 32 columns of C (FP32, kOutLd floats a row) at tile row m and column n goes to
// epilogue(slice, m, n, lane), by the warp's 32 lanes together. `rows` says which of A's rows
// matter (AllRows, FirstRows below).
template <typename Shape, typename Rows, typename SideA, typename SideB, typename Epilogue>
__device__ __forceinline__ void PipelinedTile(PipelineShared<Shape>& s, int64_t K, Rows rows, const SideA& a,
                                              const SideB& b, Epilogue epilogue) {
  using namespace nvcuda;
  constexpr int kFM = Shape::kFM, kFN = Shape::kFN, kBK = Shape::kBK, kLd = Shape::kLd;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int wm = (warp / Shape::kWarpsN) * Shape::kWM, wn = (warp % Shape::kWarpsN) * Shape::kWN;
  const bool warp_rows = rows.Has(wm);  // warp-uniform
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFM][kFN];
#pragma unroll
  for (int i = 0; i < kFM; ++i)
#pragma unroll
    for (int j = 0; j < kFN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  using LayoutA = RunLayout<Shape, Shape::kBM, SideA::Run::kHalves>;
  using LayoutB = RunLayout<Shape, Shape::kBN, SideB::Run::kHalves>;
  const LayoutA la(tid);
  const LayoutB lb(tid);
  const int K32 = static_cast<int>(K);
  int ca[LayoutA::kRuns], cb[LayoutB::kRuns];
#pragma unroll
  for (int i = 0; i < LayoutA::kRuns; ++i) ca[i] = a.At(la.row0 + i * LayoutA::kPass);
#pragma unroll
  for (int i = 0; i < LayoutB::kRuns; ++i) cb[i] = b.At(lb.row0 + i * LayoutB::kPass);
  // A step's runs in registers, from their loads to their stash in shared memory.
  struct Runs {
    typename SideA::Run a[LayoutA::kRuns];
    typename SideB::Run b[LayoutB::kRuns];
  };
  // Every step but a last one past K reads whole runs without a bound (a uniform branch).
  auto fetch = [&](Runs& r, int k0) {
    const int ka = k0 + la.col, kb = k0 + lb.col;
    if (k0 + kBK <= K32) {
#pragma unroll
      for (int i = 0; i < LayoutA::kRuns; ++i) r.a[i] = a.Fetch(ca[i], ka, true);
#pragma unroll
      for (int i = 0; i < LayoutB::kRuns; ++i) r.b[i] = b.Fetch(cb[i], kb, true);
    } else {
#pragma unroll
      for (int i = 0; i < LayoutA::kRuns; ++i) r.a[i] = a.Fetch(ca[i], ka, ka < K32);
#pragma unroll
      for (int i = 0; i < LayoutB::kRuns; ++i) r.b[i] = b.Fetch(cb[i], kb, kb < K32);
    }
  };
  auto stash = [&](const Runs& r, int stage) {
    __half* const to_a = s.A(stage, la.row0) + la.col;
    __half* const to_b = s.B(stage, lb.row0) + lb.col;
#pragma unroll
    for (int i = 0; i < LayoutA::kRuns; ++i) SideA::Stash(r.a[i], to_a + i * LayoutA::kPass * kLd);
#pragma unroll
    for (int i = 0; i < LayoutB::kRuns; ++i) SideB::Stash(r.b[i], to_b + i * LayoutB::kPass * kLd);
  };
  auto multiply = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[kFN];
#pragma unroll
      for (int j = 0; j < kFN; ++j) wmma::load_matrix_sync(fb[j], s.B(stage, wn + 16 * j) + kk, kLd);
#pragma unroll
      for (int i = 0; i < kFM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, s.A(stage, wm + 16 * i) + kk, kLd);
#pragma unroll
        for (int j = 0; j < kFN; ++j) wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
      }
    }
  };

  // A stage's buffer is written only after the barrier that closed the step which last read it.
  const int steps = static_cast<int>(CeilDivDevice(K, kBK));
  if constexpr (Shape::kAhead == 1) {
    Runs r;
    fetch(r, 0);
    stash(r, 0);
    __syncthreads();
    for (int step = 0; step < steps; ++step) {
      const int stage = step & 1;
      if (step + 1 < steps) fetch(r, (step + 1) * kBK);
      if (warp_rows) multiply(stage);
      if (step + 1 < steps) stash(r, stage ^ 1);
      __syncthreads();
    }
  } else {
    // Two sets of runs in turn: step t's loads go out at the start of step t − 2 and reach shared
    // memory at the end of step t − 1, so two steps of products cover their latency. Even steps
    // multiply stage 0 from set r0, odd steps stage 1 from set r1 (named, so both stay in registers).
    Runs r0, r1;
    fetch(r0, 0);
    stash(r0, 0);
    if (steps > 1) fetch(r1, kBK);
    __syncthreads();
    for (int step = 0; step < steps; step += 2) {
      if (step + 2 < steps) fetch(r0, (step + 2) * kBK);
      if (warp_rows) multiply(0);
      if (step + 1 < steps) stash(r1, 1);
      __syncthreads();
      if (step + 1 == steps) break;
      if (step + 3 < steps) fetch(r1, (step + 3) * kBK);
      if (warp_rows) multiply(1);
      if (step + 2 < steps) stash(r0, 0);
      __syncthreads();
    }
  }

  float* slice = s.Out(warp);
#pragma unroll
  for (int i = 0; i < kFM; ++i) {
    if (!rows.Has(wm + 16 * i)) break;
#pragma unroll
    for (int j = 0; j < kFN; j += 2) {
      wmma::store_matrix_sync(slice, acc[i][j], Shape::kOutLd, wmma::mem_row_major);
      wmma::store_matrix_sync(slice + 16, acc[i][j + 1], Shape::kOutLd, wmma::mem_row_major);
      __syncwarp();
      epilogue(static_cast<const float*>(slice), wm + 16 * i, wn + 16 * j, lane);
      __syncwarp();
    }
  }
}

}  // namespace q38::cuda
