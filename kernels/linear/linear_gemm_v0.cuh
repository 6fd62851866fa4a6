// The prefill GEMM as it stood before the pipelined tile of linear_gemm.cuh (commit 326cbe4), kept
// for kernels/linear/linear_bench.cu alone: the baseline ("v0") the bench times beside the
// current tiles in the same process. Not part of the library. A 64×64 FP32 tile of A·Bᵀ by a
// block of four warps (each a 32×32 quarter as 2×2 WMMA fragments), K advancing 32 columns at a
// time through one shared buffer: each step's loads wait for the step before to finish its math.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::gemm_v0 {

constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kTileThreads = 128;

struct TileShared {
  static constexpr int kPad = 8;  // keeps the fragment loads off one shared-memory bank
  __half a[kTileM][kTileK + kPad];
  __half b[kTileN][kTileK + kPad];
  float c[kTileM][kTileN + 4];
};

// Fills s.c with the tile. load_a(row, k, dst) writes the 8 halves of A's tile row `row` from
// column k to dst (zeros past the edges of the tile's rows or of K); load_b likewise for B.
template <typename LoadA, typename LoadB>
__device__ __forceinline__ void MmaTile(TileShared& s, int64_t K, LoadA load_a, LoadB load_b) {
  using namespace nvcuda;
  const int warp = threadIdx.x / kWarp;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    // 64 rows × 32 columns per operand = 256 runs of 8 halves; 128 threads take two of each.
    for (int r = threadIdx.x; r < kTileM * kTileK / 8; r += blockDim.x) {
      const int row = r / (kTileK / 8), col = (r % (kTileK / 8)) * 8;
      load_a(row, k0 + col, &s.a[row][col]);
      load_b(row, k0 + col, &s.b[row][col]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &s.a[wm + 16 * i][kk], kTileK + TileShared::kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &s.b[wn + 16 * j][kk], kTileK + TileShared::kPad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&s.c[wm + 16 * i][wn + 16 * j], acc[i][j], kTileN + 4, wmma::mem_row_major);
  __syncthreads();
}

// Eight halves of a row-major FP16 matrix from column k, zeros past K or for a missing row.
__device__ __forceinline__ void LoadHalf8(const __half* row, int64_t k, int64_t K, bool vec, __half* dst) {
  if (row != nullptr && vec && k + 8 <= K) {
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(row + k));
    return;
  }
  for (int i = 0; i < 8; ++i) dst[i] = (row != nullptr && k + i < K) ? row[k + i] : __float2half(0.0f);
}

// One 64×64 tile of y per block; tiles past the edges of T, N or K are zero-filled.
__global__ void __launch_bounds__(kTileThreads)
    GemmKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y, int64_t T,
               int64_t K, int64_t N, bool vec) {
  __shared__ __align__(32) TileShared s;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  MmaTile(
      s, K,
      [&](int row, int64_t k, __half* dst) { LoadHalf8(m0 + row < T ? x + (m0 + row) * K : nullptr, k, K, vec, dst); },
      [&](int row, int64_t k, __half* dst) { LoadHalf8(n0 + row < N ? w + (n0 + row) * K : nullptr, k, K, vec, dst); });
  for (int e = threadIdx.x; e < kTileM * kTileN; e += blockDim.x) {
    const int r = e / kTileN, c = e % kTileN;
    if (m0 + r < T && n0 + c < N) y[(m0 + r) * N + n0 + c] = __float2half(s.c[r][c]);
  }
}

inline void Launch(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(N, kTileN)), static_cast<unsigned>(CeilDiv(T, kTileM)));
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  GemmKernel<<<grid, kTileThreads, 0, stream>>>(x, w, y, T, K, N, vec);
}

}  // namespace q38::cuda::gemm_v0
