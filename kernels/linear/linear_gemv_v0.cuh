// The decode GEMV as it stood before the vector GEMV of linear_gemv.cuh (commit e700c7f), kept for
// kernels/linear/linear_bench.cu alone: the baseline ("v0") that the bench times beside the
// current kernels in the same process. Not part of the library.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/linear/linear_cuda.h"

namespace q38::cuda::gemv_v0 {

inline constexpr int kGemvThreads = 256, kGemvWarps = kGemvThreads / kWarp;

// `splits` warps per output row n (a power of two up to 8), each over every splits-th run of
// K: the row is read once, with 16-byte loads where K and the pointers allow, and dotted with
// every one of the T ≤ kGemvMaxRows input rows. Splitting K keeps a small N from leaving most
// of the GPU idle while a few warps walk long rows; the partial sums meet in shared memory in
// a fixed order, so the result depends only on the shape.
template <bool kVector>
__global__ void GemvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y, int T, int64_t K,
               int64_t N, int splits) {
  __shared__ float partial[kGemvWarps][kGemvMaxRows];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, part = warp % splits;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / splits) + warp / splits;
  float acc[kGemvMaxRows] = {};
  if (n < N) {
    const __half* row = w + n * K;
    if constexpr (kVector) {
      // Unrolled so that a lane has several weight loads in flight rather than one at a time.
#pragma unroll 4
      for (int64_t k = (part * kWarp + lane) * 8; k < K; k += int64_t{kWarp} * 8 * splits) {
        const uint4 wv = __ldg(reinterpret_cast<const uint4*>(row + k));
        const __half2* wh = reinterpret_cast<const __half2*>(&wv);
        float2 wf[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) wf[i] = __half22float2(wh[i]);
#pragma unroll
        for (int t = 0; t < kGemvMaxRows; ++t) {
          if (t >= T) break;
          const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + t * K + k));
          const __half2* xh = reinterpret_cast<const __half2*>(&xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 xf = __half22float2(xh[i]);
            acc[t] += wf[i].x * xf.x + wf[i].y * xf.y;
          }
        }
      }
    } else {
      for (int64_t k = part * kWarp + lane; k < K; k += int64_t{kWarp} * splits) {
        const float wf = __half2float(row[k]);
#pragma unroll
        for (int t = 0; t < kGemvMaxRows; ++t) {
          if (t < T) acc[t] += wf * __half2float(x[t * K + k]);
        }
      }
    }
  }
  // Every index into acc is a constant after unrolling, so it stays in registers.
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    const float s = WarpSum(acc[t]);
    if (lane == 0) partial[warp][t] = s;
  }
  __syncthreads();
  if (n >= N || part != 0 || lane >= T) return;
  float s = 0;
  for (int p = 0; p < splits; ++p) s += partial[warp + p][lane];
  y[lane * N + n] = __float2half(s);
}

// Warps per row: more while N alone would give the GPU few warps and K is long enough that each
// split still walks several 256-element runs.
inline int GemvSplits(int64_t K, int64_t N) {
  constexpr int64_t kTargetWarps = 8192;
  int splits = 1;
  while (splits < kGemvWarps && N * splits < kTargetWarps && K >= int64_t{splits} * 4 * kWarp * 8) splits *= 2;
  return splits;
}

inline void Launch(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  const int splits = GemvSplits(K, N);
  const dim3 grid(static_cast<unsigned>(CeilDiv(N, kGemvWarps / splits)));
  GemvKernel<true><<<grid, kGemvThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N, splits);
}

}  // namespace q38::cuda::gemv_v0
