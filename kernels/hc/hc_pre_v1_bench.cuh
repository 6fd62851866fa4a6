// The fused pre step as it stood before (commit e1bd878: the norm read from L2 in every block
// before the dot product, the gates recomputed by every block of the up kernel), kept for
// hc_bench alone so one run times the old and the new kernels side by side. Not used by the
// model. Same contract as cuda::HcPreFused at the time (di: the down/inject outputs).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/linear/linear_gemv.cuh"

namespace q38::cuda::hc_v1 {

// The fused one-token pre step (hc_cuda.h, HcPreFused): 256 threads a block in both kernels.
constexpr int kPreThreads = 256, kPreWarps = kPreThreads / kWarp;
constexpr int kMaxStreams = 8;
// Down/inject: 2 rows a block, 4 warps a row, each lane 8 weight runs in flight before its first
// FMA (K = 10,240: 1,280 runs a row, 10 a lane).
constexpr int kDownRows = 2, kDownWarpsPerRow = kPreWarps / kDownRows, kDownLoads = 8;
// Up: a lane group of 8 a row (R = 320: 40 runs, 5 a lane), 32 rows a block = 32 / S columns.
constexpr int kUpLanes = 8, kUpRows = kPreThreads / kUpLanes, kUpLoads = 8;

// 8 FP16 weights · 8 FP16 values, in FP32.
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x) {
  const __half2* wh = reinterpret_cast<const __half2*>(&w);
  const __half2* xh = reinterpret_cast<const __half2*>(&x);
  float acc = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __half22float2(wh[i]), xf = __half22float2(xh[i]);
    acc += wf.x * xf.x + wf.y * xf.y;
  }
  return acc;
}

// di[n] = xn·W[n] for N rows of K = S·H, xn the zero-centred RmsNorm of X by streams, built in
// shared memory by every block (dynamic shared memory: K halves).
__global__ void __launch_bounds__(kPreThreads)
    HcPreDownKernel(const float* __restrict__ X, const __half* __restrict__ nw, int nw_len, const __half* __restrict__ W,
                    __half* __restrict__ di, float* __restrict__ rstd_out, int N, int S, int H, float eps) {
  extern __shared__ uint4 xs_mem[];
  __half* xs = reinterpret_cast<__half*>(xs_mem);
  __shared__ float sq[kPreWarps][kMaxStreams];
  __shared__ float inv[kMaxStreams];
  __shared__ float partial[kPreWarps];
  const int K = S * H, runs = K / 8, hruns = H / 8;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int slot = warp / kDownWarpsPerRow, part = warp % kDownWarpsPerRow;
  const int n = blockIdx.x * kDownRows + slot;
  const bool live = n < N;
  const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(live ? n : 0) * K);
  constexpr int kStep = kWarp * kDownWarpsPerRow;  // a lane's consecutive runs are kStep apart
  const int first = part * kWarp + lane;

  // The first weight loads go out before the norm, which only reads X (hot in L2).
  uint4 wv[kDownLoads];
#pragma unroll
  for (int u = 0; u < kDownLoads; ++u) {
    const int c = first + u * kStep;
    wv[u] = live && c < runs ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
  }

  // Per-stream sums of squares: warps' sums in shared memory, added in warp order.
  for (int s = 0; s < S; ++s) {
    float ss = 0;
    for (int r = threadIdx.x; r < hruns; r += kPreThreads) {
      float v[8];
      LoadF<8>(X + static_cast<int64_t>(s * hruns + r) * 8, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
    }
    ss = WarpSum(ss);
    if (lane == 0) sq[warp][s] = ss;
  }
  __syncthreads();
  if (threadIdx.x < S) {
    float ss = 0;
    for (int w = 0; w < kPreWarps; ++w) ss += sq[w][threadIdx.x];
    const float r = rsqrtf(ss / H + eps);
    inv[threadIdx.x] = r;
    if (blockIdx.x == 0) rstd_out[threadIdx.x] = r;
  }
  __syncthreads();
  // xn in FP16, as the composition's RmsNorm writes it: x · (1/rms · (1 + w)).
  for (int r = threadIdx.x; r < runs; r += kPreThreads) {
    float v[8], wn[8];
    LoadF<8>(X + static_cast<int64_t>(r) * 8, v);
    LoadF<8>(nw + (r * 8) % nw_len, wn);
    const float rs = inv[r / hruns];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] *= rs * (1.0f + wn[j]);
    StoreHalves<8>(xs + static_cast<int64_t>(r) * 8, v);
  }
  __syncthreads();

  const uint4* x4 = reinterpret_cast<const uint4*>(xs);
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kDownLoads; ++u) {
    const int c = first + u * kStep;
    if (c < runs) acc += Dot8(wv[u], x4[c]);
  }
  // The rest of the row, kDownLoads runs a lane at a time (the bound is the warp's first run, the
  // same for every lane).
  for (int c0 = first + kDownLoads * kStep; c0 - lane < runs; c0 += kDownLoads * kStep) {
#pragma unroll
    for (int u = 0; u < kDownLoads; ++u) {
      const int c = c0 + u * kStep;
      wv[u] = live && c < runs ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kDownLoads; ++u) {
      const int c = c0 + u * kStep;
      if (c < runs) acc += Dot8(wv[u], x4[c]);
    }
  }
  acc = WarpSum(acc);
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (threadIdx.x < kDownRows) {
    const int nn = blockIdx.x * kDownRows + threadIdx.x;
    if (nn < N) {
      float sum = 0;
      for (int p = 0; p < kDownWarpsPerRow; ++p) sum += partial[threadIdx.x * kDownWarpsPerRow + p];
      di[nn] = __float2half(sum);
    }
  }
}

// h[c] = mean_s sigmoid(U[s·H + c]·a) · xn[s·H + c], a = silu(di[:R] / S) (dynamic shared memory:
// R halves); block 0 also writes g = 2·sigmoid(di[R:] / S). Block b serves the (column, stream)
// pairs 32·b.. in column-major order, so its columns are whole.
__global__ void __launch_bounds__(kPreThreads)
    HcPreUpKernel(const __half* __restrict__ di, const __half* __restrict__ U, const float* __restrict__ X,
                  const __half* __restrict__ nw, int nw_len, const float* __restrict__ rstd, __half* __restrict__ h,
                  __half* __restrict__ g, int S, int H, int R, bool inject) {
  extern __shared__ uint4 a_mem[];
  __half* as = reinterpret_cast<__half*>(a_mem);
  __shared__ float contrib[kUpRows];
  const int grp = threadIdx.x / kUpLanes, l = threadIdx.x % kUpLanes;
  const int j = blockIdx.x * kUpRows + grp, c = j / S, s = j % S;
  const bool live = c < H;
  const int ri = s * H + c, runs = R / 8;
  const uint4* row = reinterpret_cast<const uint4*>(U + static_cast<int64_t>(live ? ri : 0) * R);

  uint4 wv[kUpLoads];
#pragma unroll
  for (int u = 0; u < kUpLoads; ++u) {
    const int cc = l + u * kUpLanes;
    wv[u] = live && cc < runs ? gemv::LoadStreamed(row + cc) : make_uint4(0, 0, 0, 0);
  }
  // This row's xn, exactly as the down kernel put it in shared memory.
  float xn = 0;
  if (live) xn = __half2float(__float2half(X[ri] * (rstd[s] * (1.0f + __half2float(nw[ri % nw_len])))));
  // The gates, as HcGatesKernel computes them.
  const float sf = static_cast<float>(S);
  for (int r = threadIdx.x; r < R; r += kPreThreads) as[r] = __float2half(Silu(__half2float(di[r]) / sf));
  if (blockIdx.x == 0 && inject && threadIdx.x < S) {
    g[threadIdx.x] = __float2half(2.0f * Sigmoid(__half2float(di[R + threadIdx.x]) / sf));
  }
  __syncthreads();

  const uint4* a4 = reinterpret_cast<const uint4*>(as);
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kUpLoads; ++u) {
    const int cc = l + u * kUpLanes;
    if (cc < runs) acc += Dot8(wv[u], a4[cc]);
  }
  for (int c0 = l + kUpLoads * kUpLanes; c0 - l < runs; c0 += kUpLoads * kUpLanes) {
#pragma unroll
    for (int u = 0; u < kUpLoads; ++u) {
      const int cc = c0 + u * kUpLanes;
      wv[u] = live && cc < runs ? gemv::LoadStreamed(row + cc) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUpLoads; ++u) {
      const int cc = c0 + u * kUpLanes;
      if (cc < runs) acc += Dot8(wv[u], a4[cc]);
    }
  }
#pragma unroll
  for (int o = kUpLanes / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (l == 0) contrib[grp] = Sigmoid(__half2float(__float2half(acc))) * xn;  // m rounded to FP16 first
  __syncthreads();
  const int cols = kUpRows / S;
  if (threadIdx.x < cols) {
    const int cc = blockIdx.x * cols + threadIdx.x;
    if (cc < H) {
      float sum = 0;
      for (int t = 0; t < S; ++t) sum += contrib[threadIdx.x * S + t];
      h[cc] = __float2half(sum / sf);
    }
  }
}

inline void HcPreDown(const float* X, const __half* norm, int64_t norm_len, const __half* down_inject, __half* di,
                      float* rstd, int64_t S, int64_t H, int64_t R, bool inject, float eps, cudaStream_t stream) {
  const int64_t N = R + (inject ? S : 0);
  HcPreDownKernel<<<CeilDiv(N, kDownRows), kPreThreads, S * H * 2, stream>>>(
      X, norm, static_cast<int>(norm_len), down_inject, di, rstd, static_cast<int>(N), static_cast<int>(S),
      static_cast<int>(H), eps);
  Q38_CUDA_LAUNCHED();
}
inline void HcPreUp(const float* X, const __half* norm, int64_t norm_len, const __half* up, __half* h, __half* g,
                    const __half* di, const float* rstd, int64_t S, int64_t H, int64_t R, bool inject,
                    cudaStream_t stream) {
  HcPreUpKernel<<<CeilDiv(S * H, kUpRows), kPreThreads, CeilDiv(R * 2, 16) * 16, stream>>>(
      di, up, X, norm, static_cast<int>(norm_len), rstd, h, g, static_cast<int>(S), static_cast<int>(H),
      static_cast<int>(R), inject);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda::hc_v1
