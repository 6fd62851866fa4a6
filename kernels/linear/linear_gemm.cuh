// The dense FP16 GEMM of prefill, y[T,N] = x[T,K]·w[N,K]ᵀ for T > kGemvMaxRows, on the pipelined
// WMMA tile (kernels/cuda/wmma_pipeline.cuh) in four block shapes; kernels/linear/linear_cuda.cu
// picks one per problem shape (ChooseGemm), kernels/linear/linear_bench.cu times them all. Every
// shape accumulates each output in the same order (k ascending, 16 at a time), so the shape
// changes the speed and not one bit of y.
//
// 16-byte loads need K % 8 == 0 and x, w 16-byte aligned; otherwise the tile reads element by
// element (ScalarSide).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_pipeline.cuh"
#include "kernels/linear/linear_cuda.h"

namespace q38::cuda::gemm {

// `rows` rows of a row-major FP16 matrix from the tile's first row on, 16 bytes a run; tile rows
// past the edge read its last row.
struct DenseSide {
  using Run = HalfRun;
  const __half* first;
  int64_t rows, K;
  __device__ __forceinline__ int At(int row) const { return static_cast<int>((row < rows ? row : rows - 1) * K); }
  __device__ __forceinline__ Run Fetch(int row, int k, bool in_k) const { return FetchHalfRun(first, row, k, in_k); }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) { StashHalfRun(r, dst); }
};

// The same element by element, zeros past K (it bounds each element and ignores in_k): any K
// below LaunchTiled's bound, any alignment.
struct ScalarSide {
  using Run = HalfRun;
  const __half* first;
  int64_t rows, K;
  __device__ __forceinline__ int At(int row) const { return static_cast<int>((row < rows ? row : rows - 1) * K); }
  __device__ __forceinline__ Run Fetch(int row, int k, bool) const {
    Run r;
    __half* h = reinterpret_cast<__half*>(&r.v);
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = k + i < K ? first[static_cast<uint32_t>(row + k + i)] : __float2half(0.0f);
    return r;
  }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) { StashHalfRun(r, dst); }
};

// A 16 × 32 slice of C to y in FP16: lane l writes row l / 2, columns (l % 2) · 16 onward, as two
// 16-byte stores where the row's 16 columns lie inside N and y's rows are 16-byte aligned.
__device__ __forceinline__ void StoreSlice(const float* slice, int ld, __half* y, int64_t T, int64_t N, int64_t row0,
                                           int64_t col0, int lane, bool vec) {
  const int r = lane / 2, c = (lane % 2) * 16;
  const int64_t row = row0 + r, col = col0 + c;
  if (row >= T) return;
  const float* src = slice + r * ld + c;
  __half* dst = y + row * N + col;
  if (vec && col + 16 <= N) {
    StoreHalves<8>(dst, src);
    StoreHalves<8>(dst + 8, src + 8);
    return;
  }
  for (int i = 0; i < 16 && col + i < N; ++i) dst[i] = __float2half(src[i]);
}

template <typename Shape, int kMinBlocks, typename Side>
__global__ void __launch_bounds__(Shape::kThreads, kMinBlocks)
    TiledGemmKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y, int64_t T,
                    int64_t K, int64_t N, bool vec_out) {
  PipelineShared<Shape> s{DynamicShared()};
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * Shape::kBM, n0 = static_cast<int64_t>(blockIdx.x) * Shape::kBN;
  const Side a{x + m0 * K, T - m0, K}, b{w + n0 * K, N - n0, K};
  PipelinedTile<Shape>(s, K, AllRows{}, a, b, [&](const float* slice, int m, int n, int lane) {
    StoreSlice(slice, Shape::kOutLd, y, T, N, m0 + m, n0 + n, lane, vec_out);
  });
}

// The block shapes GemmTile names: 128×128 by 8 warps of 64×32 (steps of 64 columns with loads one
// or two steps ahead, or steps of 32) or 4 of 64×64; 128×64 by 4 warps of 64×32; 64×64 by 4 warps
// of 32×32; blocks an SM as their registers and shared memory allow.
using Tile128x128w8 = TileShape<128, 128, 2, 4>;
using Tile128x128k64w8 = TileShape<128, 128, 2, 4, 64>;
using Tile128x128k64w8a2 = TileShape<128, 128, 2, 4, 64, 2>;
using Tile128x128w4 = TileShape<128, 128, 2, 2>;
using Tile128x64w4 = TileShape<128, 64, 2, 2>;
using Tile64x64w4 = TileShape<64, 64, 2, 2>;

template <typename Shape, int kMinBlocks>
void LaunchTiled(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  CHECK_LT(K, int64_t{1} << 24) << "the tile's rows are addressed by 32-bit offsets";
  const dim3 grid(static_cast<unsigned>(CeilDiv(N, Shape::kBN)), static_cast<unsigned>(CeilDiv(T, Shape::kBM)));
  const bool vec_out = N % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  const bool vec_in = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const auto kernel = vec_in ? TiledGemmKernel<Shape, kMinBlocks, DenseSide> : TiledGemmKernel<Shape, kMinBlocks, ScalarSide>;
  AllowShared<Shape>(kernel);
  kernel<<<grid, Shape::kThreads, Shape::kSharedBytes, stream>>>(x, w, y, T, K, N, vec_out);
}

}  // namespace q38::cuda::gemm
