// The dense FP16 GEMV of decode, y[T,N] = x[T,K]·w[N,K]ᵀ for T ≤ kGemvMaxRows, as a template over
// how a block divides the weights; kernels/linear/linear_cuda.cu instantiates it and picks a
// configuration per shape (ChooseGemv), kernels/linear/linear_bench.cu sweeps them all.
//
// A block of 256 threads. Each output row goes to a group of kG lanes (8, 16 or 32), each lane
// taking 16-byte runs of K (8 halves) kG runs apart; `splits` warps of the block (1, 2, 4 or 8)
// share each row's K, interleaved by run. A lane issues kU weight loads (4 or 8 runs: 64 or 128
// bytes in flight) before the first FMA, without allocating them in L1, then reads the matching
// runs of x (small and hot in L1) and accumulates every one of the T rows in FP32. Lane groups sum
// by shuffles, split warps meet in shared memory in a fixed order: the result depends on the lane
// group and the splits (not on kU), and those only on the shape.
//
// Needs K % 8 == 0 and x, w 16-byte aligned; linear_cuda.cu's scalar kernel takes the rest.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::gemv {

constexpr int kThreads = 256, kWarps = kThreads / kWarp;

// A 16-byte weight load through the read-only path without allocating in L1: each weight is
// read once, and streaming them through L1 would evict x (measured: up to 20% faster at T = 1).
// ld.global.nc.L1::no_allocate is PTX ISA 7.4 for sm_70 and later.
__device__ __forceinline__ uint4 LoadStreamed(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int kT, int kG, int kU>
__global__ void __launch_bounds__(kThreads, 2)
    WideGemvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y, int T, int K,
                   int N, int splits) {
  static_assert(kG == 8 || kG == 16 || kG == 32, "lane groups divide a warp");
  constexpr int kGroups = kWarp / kG;  // lane groups (rows) per warp
  __shared__ float partial[kWarps][kGroups][kT];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = warp % splits, slot = warp / splits;  // slot: which rows of the block this warp serves
  const int group = lane / kG, l = lane % kG;
  const int rows_per_block = (kWarps / splits) * kGroups;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * rows_per_block + slot * kGroups + group;
  const int runs = K / 8, step = kG * splits;  // a lane's consecutive runs are `step` apart
  const bool live = n < N;
  const uint4* row = reinterpret_cast<const uint4*>(w + (live ? n : 0) * static_cast<int64_t>(K));

  float acc[kT] = {};
  // The bound is the lane group's first run, the same for the whole warp, so every lane reaches
  // the shuffles below.
  for (int c0 = part * kG + l; c0 - l < runs; c0 += kU * step) {
    // Every weight load of the batch first, then x and the arithmetic.
    uint4 wv[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * step;
      wv[u] = live && c < runs ? LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * step;
      if (c >= runs) break;
      float wf[8];
      const __half2* h = reinterpret_cast<const __half2*>(&wv[u]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(h[i]);
        wf[2 * i] = f.x;
        wf[2 * i + 1] = f.y;
      }
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        if (t >= T) break;
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * K) + c);
        const __half2* xh = reinterpret_cast<const __half2*>(&xv);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 xf = __half22float2(xh[i]);
          acc[t] += wf[2 * i] * xf.x + wf[2 * i + 1] * xf.y;
        }
      }
    }
  }
  // The lane group's sum (xor within aligned groups of kG lanes); every lane of a group ends
  // with it.
#pragma unroll
  for (int t = 0; t < kT; ++t)
#pragma unroll
    for (int o = kG / 2; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);

  if (splits == 1) {
#pragma unroll
    for (int t = 0; t < kT; ++t)
      if (l == t && t < T && live) y[static_cast<int64_t>(t) * N + n] = __float2half(acc[t]);
    return;
  }
  if (l == 0) {
#pragma unroll
    for (int t = 0; t < kT; ++t) partial[warp][group][t] = acc[t];
  }
  __syncthreads();
  // One thread per (row of the block, t): the split warps' partial sums in order of their part.
  for (int e = threadIdx.x; e < rows_per_block * kT; e += kThreads) {
    const int i = e / kT, t = e % kT, s = i / kGroups, g = i % kGroups;
    const int64_t row_n = static_cast<int64_t>(blockIdx.x) * rows_per_block + i;
    if (t >= T || row_n >= N) continue;
    float sum = 0;
    for (int p = 0; p < splits; ++p) sum += partial[s * splits + p][g][t];
    y[static_cast<int64_t>(t) * N + row_n] = __float2half(sum);
  }
}

// Launches WideGemvKernel<kT, kG, kU> with kT the smallest of 1, 2, 4, 8 that holds T.
template <int kG, int kU>
void LaunchWide(const __half* x, const __half* w, __half* y, int T, int K, int N, int splits, cudaStream_t stream) {
  const int rows_per_block = (kWarps / splits) * (kWarp / kG);
  const dim3 grid(static_cast<unsigned>((static_cast<int64_t>(N) + rows_per_block - 1) / rows_per_block));
  if (T <= 1) {
    WideGemvKernel<1, kG, kU><<<grid, kThreads, 0, stream>>>(x, w, y, T, K, N, splits);
  } else if (T <= 2) {
    WideGemvKernel<2, kG, kU><<<grid, kThreads, 0, stream>>>(x, w, y, T, K, N, splits);
  } else if (T <= 4) {
    WideGemvKernel<4, kG, kU><<<grid, kThreads, 0, stream>>>(x, w, y, T, K, N, splits);
  } else {
    WideGemvKernel<8, kG, kU><<<grid, kThreads, 0, stream>>>(x, w, y, T, K, N, splits);
  }
}

}  // namespace q38::cuda::gemv
