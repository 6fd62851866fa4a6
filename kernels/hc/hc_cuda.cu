#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/hc/hc_cuda.h"
#include "kernels/linear/linear_gemv.cuh"

namespace q38::cuda {
namespace {

__global__ void EmbedStreamsKernel(const __half* __restrict__ table, const int32_t* __restrict__ ids,
                                   float* __restrict__ X, int64_t T, int64_t S, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * S * H) return;
  const int64_t t = i / (S * H), c = i % H;
  X[i] = __half2float(table[static_cast<int64_t>(ids[t]) * H + c]);
}

__global__ void HcGatesKernel(const __half* __restrict__ di, __half* __restrict__ a, __half* __restrict__ g, int64_t T,
                              int64_t R, int64_t S, bool inject) {
  const int64_t width = R + (inject ? S : 0);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * width) return;
  const int64_t t = i / width, c = i % width;
  const float v = __half2float(di[i]) / static_cast<float>(S);
  if (c < R) {
    a[t * R + c] = __float2half(Silu(v));
  } else {
    g[t * S + (c - R)] = __float2half(2.0f * Sigmoid(v));
  }
}

__global__ void HcCombineKernel(const __half* __restrict__ m, const __half* __restrict__ xn, __half* __restrict__ h,
                                int64_t T, int64_t S, int64_t H) {
  const int64_t c = TokenColumn();
  if (c >= H) return;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    float acc = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t j = (t * S + s) * H + c;
      acc += Sigmoid(__half2float(m[j])) * __half2float(xn[j]);
    }
    h[t * H + c] = __float2half(acc / static_cast<float>(S));
  }
}

// X + g·y as one rounding: the fused pre step (HcLastResidual) makes the same update.
__device__ __forceinline__ float ResidualOf(float x, float g, float y) { return __fmaf_rn(g, y, x); }

// A thread a column of a token: y read once for the S streams, whose kAhead values of X are
// loaded before any is stored (a store to X could alias the next load, so the compiler would not
// move the loads ahead itself: one memory round trip a stream in a decode step).
__global__ void HcResidualKernel(float* X, const __half* __restrict__ g, const __half* __restrict__ y, int64_t T,
                                 int64_t S, int64_t H) {
  constexpr int kAhead = 8;
  const int64_t c = TokenColumn();
  if (c >= H) return;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    const float yv = __half2float(y[t * H + c]);
    for (int64_t s0 = 0; s0 < S; s0 += kAhead) {
      float x[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        if (s0 + j < S) x[j] = X[(t * S + s0 + j) * H + c];
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        if (s0 + j < S) X[(t * S + s0 + j) * H + c] = ResidualOf(x[j], __half2float(g[t * S + s0 + j]), yv);
      }
    }
  }
}

// The fused one-token pre step (hc_cuda.h, HcPreFused): 256 threads a block in both kernels.
constexpr int kPreThreads = 256, kPreWarps = kPreThreads / kWarp;
constexpr int kMaxStreams = 8;
// Down/inject: thread i of a block takes the runs (8 values) i, i + 256, ... of K: at most
// kMaxLaneRuns of them (K ≤ 12,288; the model's 10,240 is 5 a thread).
constexpr int kMaxLaneRuns = 6;

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

// kRows rows of down_inject W [N, K = S·H] a block against xn, the zero-centred RmsNorm of X by
// streams, then the gates of those rows: a[n] = silu(di[n] / S) for n < R, g[n - R] =
// 2·sigmoid(di[n] / S) above (di rounded to FP16 first, as the composition stores it).
// Thread i owns the runs c = i + 256·u (u < kL) of K for every row of the block: it issues all
// kRows·kL weight loads first (past L1), then its runs of X (FP32) and of the norm weights, which
// stay in registers (with a last residual, X + g·y as HcResidualKernel makes it; X itself is
// left for the up kernel to update). The per-stream sums of squares meet in shared memory (per
// run, then one warp a stream in a fixed order), so X is read once a block and the only waits
// before the dot product are one L2 round trip and two barriers. xn is rounded to FP16 where the
// composition's RmsNorm rounds it: x · (1/rms · (1 + w)).
template <int kRows, int kL>
__global__ void __launch_bounds__(kPreThreads)
    HcPreDownKernel(const float* __restrict__ X, HcLastResidual last, const __half* __restrict__ nw, int nw_len,
                    const __half* __restrict__ W, __half* __restrict__ a, __half* __restrict__ g,
                    float* __restrict__ rstd_out, int N, int R, int S, int H, float eps) {
  __shared__ float sq[kL * kPreThreads];  // per run of K: its sum of squares
  __shared__ float inv[kMaxStreams];
  __shared__ float partial[kRows][kPreWarps];
  const int K = S * H, runs = K / 8, hruns = H / 8;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n0 = blockIdx.x * kRows;

  uint4 wv[kRows][kL];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bool live = n0 + r < N;
    const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(live ? n0 + r : 0) * K);
#pragma unroll
    for (int u = 0; u < kL; ++u) {
      const int c = threadIdx.x + u * kPreThreads;
      wv[r][u] = live && c < runs ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
  }
  float x[kL][8];
  uint4 nv[kL];
#pragma unroll
  for (int u = 0; u < kL; ++u) {
    const int c = threadIdx.x + u * kPreThreads;
    if (c < runs) {
      LoadF<8>(X + static_cast<int64_t>(c) * 8, x[u]);
      nv[u] = __ldg(reinterpret_cast<const uint4*>(nw + (c * 8) % nw_len));
      if (last.g != nullptr) {
        const uint4 yv = __ldg(reinterpret_cast<const uint4*>(last.y + (c % hruns) * 8));
        const __half* yh = reinterpret_cast<const __half*>(&yv);
        const float gs = __half2float(last.g[c / hruns]);
#pragma unroll
        for (int j = 0; j < 8; ++j) x[u][j] = ResidualOf(x[u][j], gs, __half2float(yh[j]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[u][j] = 0;
      nv[u] = make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int u = 0; u < kL; ++u) {
    const int c = threadIdx.x + u * kPreThreads;
    float q = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) q += x[u][j] * x[u][j];
    if (c < runs) sq[c] = q;
  }
  __syncthreads();
  // Stream s's sum: warp s adds its runs lane-strided, then across the warp.
  if (warp < S) {
    float ss = 0;
    for (int r = lane; r < hruns; r += kWarp) ss += sq[warp * hruns + r];
    ss = WarpSum(ss);
    if (lane == 0) {
      const float rs = rsqrtf(ss / H + eps);
      inv[warp] = rs;
      if (blockIdx.x == 0) rstd_out[warp] = rs;
    }
  }
  __syncthreads();

  uint4 xn[kL];
#pragma unroll
  for (int u = 0; u < kL; ++u) {
    const int c = threadIdx.x + u * kPreThreads;
    const float rs = c < runs ? inv[c / hruns] : 0.0f;
    const __half2* nh = reinterpret_cast<const __half2*>(&nv[u]);
    __half2* xh = reinterpret_cast<__half2*>(&xn[u]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 wf = __half22float2(nh[i]);
      xh[i] = __floats2half2_rn(x[u][2 * i] * (rs * (1.0f + wf.x)), x[u][2 * i + 1] * (rs * (1.0f + wf.y)));
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float acc = 0;
#pragma unroll
    for (int u = 0; u < kL; ++u) acc += Dot8(wv[r][u], xn[u]);  // runs past K are zeros on both sides
    acc = WarpSum(acc);
    if (lane == 0) partial[r][warp] = acc;
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int n = n0 + threadIdx.x;
    if (n < N) {
      float sum = 0;
      for (int w = 0; w < kPreWarps; ++w) sum += partial[threadIdx.x][w];
      // The gates, as HcGatesKernel computes them from di in FP16.
      const float v = __half2float(__float2half(sum)) / static_cast<float>(S);
      if (n < R) {
        a[n] = __float2half(Silu(v));
      } else {
        g[n - R] = __float2half(2.0f * Sigmoid(v));
      }
    }
  }
}

// h[c] = mean_s sigmoid(U[s·H + c]·a) · xn[s·H + c]. A lane group of kLanes a row of up (R
// values) reads its weights past L1 and a (hot in L1 and L2) beside them; block b serves the
// (column, stream) pairs 256/kLanes·b.. in column-major order, so its columns are whole, and they
// meet in shared memory in stream order. xn is rebuilt from X and rstd exactly as the down
// kernel rounded it; with a last residual the group's first lane also stores X + g·y, the one
// write of each value of X (no other block reads it).
template <int kLanes>
__global__ void __launch_bounds__(kPreThreads)
    HcPreUpKernel(const __half* __restrict__ a, const __half* __restrict__ U, float* X, HcLastResidual last,
                  const __half* __restrict__ nw, int nw_len, const float* __restrict__ rstd, __half* __restrict__ h,
                  int S, int H, int R) {
  constexpr int kRowsPerBlock = kPreThreads / kLanes, kLoads = 64 / kLanes;  // 64 runs (R = 512) a batch
  __shared__ float contrib[kRowsPerBlock];
  const int grp = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
  const int j = blockIdx.x * kRowsPerBlock + grp, c = j / S, s = j % S;
  const bool live = c < H;
  const int ri = s * H + c, runs = R / 8;
  const uint4* row = reinterpret_cast<const uint4*>(U + static_cast<int64_t>(live ? ri : 0) * R);
  const uint4* a4 = reinterpret_cast<const uint4*>(a);
  // This row's xn, exactly as the down kernel rounded it (its loads go out with the weights').
  float xv = 0, xn = 0;
  if (live) {
    xv = X[ri];
    if (last.g != nullptr) xv = ResidualOf(xv, __half2float(last.g[s]), __half2float(last.y[c]));
    xn = __half2float(__float2half(xv * (rstd[s] * (1.0f + __half2float(nw[ri % nw_len])))));
  }
  if (last.g != nullptr) {
    __syncwarp();  // every lane of the group has read X[ri] before its first lane stores it
    if (live && l == 0) X[ri] = xv;
  }

  float acc = 0;
  for (int c0 = l; c0 - l < runs; c0 += kLoads * kLanes) {
    uint4 wv[kLoads], av[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int cc = c0 + u * kLanes;
      wv[u] = live && cc < runs ? gemv::LoadStreamed(row + cc) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int cc = c0 + u * kLanes;
      av[u] = cc < runs ? __ldg(a4 + cc) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) acc += Dot8(wv[u], av[u]);
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (l == 0) contrib[grp] = Sigmoid(__half2float(__float2half(acc))) * xn;  // m rounded to FP16 first
  __syncthreads();
  const int cols = kRowsPerBlock / S;
  if (threadIdx.x < cols) {
    const int cc = blockIdx.x * cols + threadIdx.x;
    if (cc < H) {
      float sum = 0;
      for (int t = 0; t < S; ++t) sum += contrib[threadIdx.x * S + t];
      h[cc] = __float2half(sum / static_cast<float>(S));
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kRows>
void LaunchDown(int lane_runs, const float* X, HcLastResidual last, const __half* norm, int nw_len, const __half* W,
                __half* a, __half* g, float* rstd, int N, int R, int S, int H, float eps, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(N, kRows)));
  switch (lane_runs) {
#define Q38_HC_DOWN(L)                                                                                               \
  case L:                                                                                                            \
    HcPreDownKernel<kRows, L><<<grid, kPreThreads, 0, stream>>>(X, last, norm, nw_len, W, a, g, rstd, N, R, S, H, eps); \
    break;
    Q38_HC_DOWN(1)
    Q38_HC_DOWN(2)
    Q38_HC_DOWN(3)
    Q38_HC_DOWN(4)
    Q38_HC_DOWN(5)
    Q38_HC_DOWN(6)
#undef Q38_HC_DOWN
    default: LOG(FATAL) << "HcPreDown: " << lane_runs << " runs a thread";
  }
}

}  // namespace

HcPreConfig HcPreChoose(int64_t S, int64_t H, int64_t R) {
  (void)S, (void)H;
  HcPreConfig c;
  // Measured on one H200 (hc_bench, 2026-12-02, a graph of 97 pre steps): at R = 320 (324 rows of
  // K = 10,240) 4 rows a block (81 blocks, X read from L2 81 times) take the down kernel 5.5 µs
  // against 6.3 at 2 rows and 8.0 at 1; at R = 16 (20 rows) 2 rows a block are best (2.2 µs
  // against 2.3 at 4). 16 lanes a row of up beat 8 at R = 320 (4.8 µs against 5.2) and at R = 16
  // (2.5 against 2.8).
  c.down_rows = R >= 256 ? 4 : 2;
  c.up_lanes = 16;
  return c;
}

bool HcPreFusedFits(int64_t S, int64_t H, int64_t R, int64_t norm_len, const void* X, const void* norm,
                    const void* down_inject, const void* up) {
  return S >= 1 && S <= kMaxStreams && kPreThreads / 16 % S == 0 && H >= 8 && H % 8 == 0 && R >= 8 && R % 8 == 0 &&
         (norm_len == H || norm_len == S * H) && S * H / 8 <= kMaxLaneRuns * kPreThreads &&
         Aligned16(X) && Aligned16(norm) && Aligned16(down_inject) && Aligned16(up);
}

void HcPreFusedDown(const HcPreConfig& config, const float* X, const __half* norm, int64_t norm_len,
                    const __half* down_inject, __half* a, __half* g, float* rstd, int64_t S, int64_t H, int64_t R,
                    bool inject, float eps, cudaStream_t stream, HcLastResidual last) {
  const int N = static_cast<int>(R + (inject ? S : 0));
  const int lane_runs = static_cast<int>(CeilDiv(S * H / 8, kPreThreads));
  const int s = static_cast<int>(S), hh = static_cast<int>(H), r = static_cast<int>(R), nl = static_cast<int>(norm_len);
  switch (config.down_rows) {
    case 1: LaunchDown<1>(lane_runs, X, last, norm, nl, down_inject, a, g, rstd, N, r, s, hh, eps, stream); break;
    case 2: LaunchDown<2>(lane_runs, X, last, norm, nl, down_inject, a, g, rstd, N, r, s, hh, eps, stream); break;
    case 4: LaunchDown<4>(lane_runs, X, last, norm, nl, down_inject, a, g, rstd, N, r, s, hh, eps, stream); break;
    default: LOG(FATAL) << "HcPreFused: " << config.down_rows << " down rows a block";
  }
  Q38_CUDA_LAUNCHED();
}

void HcPreFusedUp(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* up,
                  const __half* a, const float* rstd, __half* h, int64_t S, int64_t H, int64_t R, cudaStream_t stream,
                  HcLastResidual last) {
  const int s = static_cast<int>(S), hh = static_cast<int>(H), r = static_cast<int>(R), nl = static_cast<int>(norm_len);
  switch (config.up_lanes) {
    case 8:
      HcPreUpKernel<8><<<CeilDiv(S * H, kPreThreads / 8), kPreThreads, 0, stream>>>(a, up, X, last, norm, nl, rstd, h, s, hh, r);
      break;
    case 16:
      HcPreUpKernel<16><<<CeilDiv(S * H, kPreThreads / 16), kPreThreads, 0, stream>>>(a, up, X, last, norm, nl, rstd, h, s,
                                                                                    hh, r);
      break;
    default: LOG(FATAL) << "HcPreFused: " << config.up_lanes << " up lanes a row";
  }
  Q38_CUDA_LAUNCHED();
}

void HcPreFused(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* down_inject,
                const __half* up, __half* h, __half* g, __half* di, float* rstd, int64_t S, int64_t H, int64_t R,
                bool inject, float eps, cudaStream_t stream, HcLastResidual last) {
  CHECK(HcPreFusedFits(S, H, R, norm_len, X, norm, down_inject, up)) << "HcPreFused: S " << S << " H " << H << " R " << R;
  CHECK(!inject || g != nullptr);
  CHECK(Aligned16(di)) << "HcPreFused: the scratch for a is read 16 bytes at a time";
  CHECK(last.g == nullptr || (last.y != nullptr && Aligned16(last.y) && last.g != g))
      << "HcPreFused: the last residual needs y 16-byte aligned and gates other than the new ones";
  HcPreFusedDown(config, X, norm, norm_len, down_inject, di, g, rstd, S, H, R, inject, eps, stream, last);
  HcPreFusedUp(config, X, norm, norm_len, up, di, rstd, h, S, H, R, stream, last);
}

void HcPreFused(float* X, const __half* norm, int64_t norm_len, const __half* down_inject, const __half* up, __half* h,
                __half* g, __half* di, float* rstd, int64_t S, int64_t H, int64_t R, bool inject, float eps,
                cudaStream_t stream, HcLastResidual last) {
  HcPreFused(HcPreChoose(S, H, R), X, norm, norm_len, down_inject, up, h, g, di, rstd, S, H, R, inject, eps, stream,
             last);
}

void EmbedStreams(const __half* table, const int32_t* ids, float* X, int64_t T, int64_t S, int64_t H,
                  cudaStream_t stream) {
  EmbedStreamsKernel<<<CeilDiv(T * S * H, 256), 256, 0, stream>>>(table, ids, X, T, S, H);
  Q38_CUDA_LAUNCHED();
}

void HcGates(const __half* di, __half* a, __half* g, int64_t T, int64_t R, int64_t S, bool inject, cudaStream_t stream) {
  const int64_t n = T * (R + (inject ? S : 0));
  HcGatesKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(di, a, g, T, R, S, inject);
  Q38_CUDA_LAUNCHED();
}

void HcCombine(const __half* m, const __half* xn, __half* h, int64_t T, int64_t S, int64_t H, cudaStream_t stream) {
  HcCombineKernel<<<TokenColumnGrid(T, H), kTokenColumnThreads, 0, stream>>>(m, xn, h, T, S, H);
  Q38_CUDA_LAUNCHED();
}

void HcResidual(float* X, const __half* g, const __half* y, int64_t T, int64_t S, int64_t H, cudaStream_t stream) {
  HcResidualKernel<<<TokenColumnGrid(T, H), kTokenColumnThreads, 0, stream>>>(X, g, y, T, S, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
