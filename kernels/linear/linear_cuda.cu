#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_tile.cuh"
#include "kernels/linear/linear_cuda.h"

namespace q38::cuda {
namespace {

// One warp per output row n: the row is read once, with 16-byte loads where K and the pointers
// allow, and dotted with every one of the T ≤ kGemvMaxRows input rows.
template <bool kVector>
__global__ void GemvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                           int T, int64_t K, int64_t N) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (n >= N) return;
  float acc[kGemvMaxRows] = {};
  const __half* row = w + n * K;
  if constexpr (kVector) {
    // Unrolled so that a lane has several weight loads in flight rather than one at a time.
#pragma unroll 4
    for (int64_t k = lane * 8; k < K; k += kWarp * 8) {
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
    for (int64_t k = lane; k < K; k += kWarp) {
      const float wf = __half2float(row[k]);
#pragma unroll
      for (int t = 0; t < kGemvMaxRows; ++t) {
        if (t < T) acc[t] += wf * __half2float(x[t * K + k]);
      }
    }
  }
  // Every index into acc is a constant after unrolling, so it stays in registers.
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= T) break;
    const float s = WarpSum(acc[t]);
    if (lane == 0) y[t * N + n] = __float2half(s);
  }
}

// WMMA GEMM: one 64×64 tile of y per block (kernels/cuda/wmma_tile.cuh); tiles past the edges of
// T, N or K are zero-filled, so any shape works.
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

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void Linear(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  if (T <= kGemvMaxRows) {
    constexpr int kThreads = 256;
    const dim3 grid(static_cast<unsigned>(CeilDiv(N * kWarp, kThreads)));
    if (K % 8 == 0 && Aligned16(x) && Aligned16(w)) {
      GemvKernel<true><<<grid, kThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N);
    } else {
      GemvKernel<false><<<grid, kThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N);
    }
  } else {
    const dim3 grid(static_cast<unsigned>(CeilDiv(N, kTileN)), static_cast<unsigned>(CeilDiv(T, kTileM)));
    const bool vec = K % 8 == 0 && Aligned16(x) && Aligned16(w);
    GemmKernel<<<grid, kTileThreads, 0, stream>>>(x, w, y, T, K, N, vec);
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
