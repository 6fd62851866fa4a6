#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/hc/hc_cuda.h"
#include "kernels/linear/linear_gemv.cuh"
#include "kernels/norm/rms_norm_group.cuh"

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

// Eight values of X + g·y, y as eight halves.
__device__ __forceinline__ void AddResidual8(float* v, float g, const uint4& y8) {
  const __half* yh = reinterpret_cast<const __half*>(&y8);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = ResidualOf(v[j], g, __half2float(yh[j]));
}

// X + g·y on its way into the norm (RmsNormGroup's update): eight values of one stream row.
struct ResidualRow {
  float* X;
  const __half* y;
  float g;
  __device__ __forceinline__ void operator()(int64_t i, float* v) const {
    AddResidual8(v, g, *reinterpret_cast<const uint4*>(y + i));
    reinterpret_cast<float4*>(X + i)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(X + i)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
};

// A block per (token, stream) row of H: HcResidualKernel's update, then RmsNormKernel's norm of
// the row (the same helper, the same threads), so X and xn have the composition's bits while X
// is read once from memory instead of twice.
__global__ void __launch_bounds__(kNormThreads)
    HcResidualNormKernel(float* X, const __half* __restrict__ g, const __half* __restrict__ y,
                         const __half* __restrict__ nw, __half* __restrict__ xn, int64_t S, int64_t H, bool w_per_row,
                         float eps) {
  const int64_t row = blockIdx.x, t = row / S, s = row % S;
  float* x = X + row * H;
  RmsNormGroup<float, 8>(x, nw + (w_per_row ? s * H : 0), xn + row * H, H, eps, 1.0f,
                         ResidualRow{x, y + t * H, __half2float(g[row])});
}

// The fused one-token pre step (hc_cuda.h, HcPreFused): 256 threads a block in both kernels.
constexpr int kPreThreads = 256, kPreWarps = kPreThreads / kWarp;
constexpr int kMaxStreams = 8;
// Down/inject: thread i of a block takes the runs (8 values) i, i + 256, ... of its stream's H
// columns: at most kMaxLaneRuns of them (H ≤ 12,288; the model's 2,560 is 2 a thread).
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

// kRows rows of down_inject W [N, K = S·H] against xn, the zero-centred RmsNorm of X by streams,
// split by streams: block (kRows rows, stream s) takes the stream's H columns alone, so it reads a
// quarter of X (at S = 4) and norms it with its own stream's sum of squares (thread, warp, then
// the warps in order); part[s·N + n] receives its part of row n's dot, which the up kernel adds
// over the streams (81 blocks each reading all of X took the down kernel 5.97 µs at full size,
// these 324 take 4.77: run D3). Thread i owns the runs i + 256·u (u < kL) of the stream for
// every row of the block: it issues all kRows·kL weight loads first (past L1), then its runs of
// X (FP32; with a last residual X + g·y as HcResidualKernel makes it; X itself is left for the up
// kernel to update) and of the norm weights. xn is rounded to FP16 where the composition's
// RmsNorm rounds it: x · (1/rms · (1 + w)). Block (0, s) writes rstd[s].
template <int kRows, int kL>
__global__ void __launch_bounds__(kPreThreads)
    HcPreDownKernel(const float* __restrict__ X, HcLastResidual last, const __half* __restrict__ nw, int nw_len,
                    const __half* __restrict__ W, float* __restrict__ part, float* __restrict__ rstd_out, int N, int S,
                    int H, float eps) {
  __shared__ float warp_sq[kPreWarps];
  __shared__ float partial[kRows][kPreWarps];
  const int K = S * H, hruns = H / 8, s = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n0 = blockIdx.x * kRows;

  uint4 wv[kRows][kL];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bool live = n0 + r < N;
    const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(live ? n0 + r : 0) * K) + s * hruns;
#pragma unroll
    for (int u = 0; u < kL; ++u) {
      const int c = threadIdx.x + u * kPreThreads;
      wv[r][u] = live && c < hruns ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
  }
  float x[kL][8];
  uint4 nv[kL];
  float q = 0;
#pragma unroll
  for (int u = 0; u < kL; ++u) {
    const int c = threadIdx.x + u * kPreThreads, gc = s * hruns + c;
    if (c < hruns) {
      LoadF<8>(X + static_cast<int64_t>(gc) * 8, x[u]);
      nv[u] = __ldg(reinterpret_cast<const uint4*>(nw + (gc * 8) % nw_len));
      if (last.g != nullptr) {
        AddResidual8(x[u], __half2float(last.g[s]), __ldg(reinterpret_cast<const uint4*>(last.y + c * 8)));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[u][j] = 0;
      nv[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) q += x[u][j] * x[u][j];
  }
  q = WarpSum(q);
  if (lane == 0) warp_sq[warp] = q;
  __syncthreads();
  float ss = 0;
  for (int w = 0; w < kPreWarps; ++w) ss += warp_sq[w];
  const float rs = rsqrtf(ss / H + eps);
  if (blockIdx.x == 0 && threadIdx.x == 0) rstd_out[s] = rs;

  uint4 xn[kL];
#pragma unroll
  for (int u = 0; u < kL; ++u) {
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
    for (int u = 0; u < kL; ++u) acc += Dot8(wv[r][u], xn[u]);  // runs past the stream are zeros on both sides
    acc = WarpSum(acc);
    if (lane == 0) partial[r][warp] = acc;
  }
  __syncthreads();
  if (threadIdx.x < kRows && n0 + static_cast<int>(threadIdx.x) < N) {
    float sum = 0;
    for (int w = 0; w < kPreWarps; ++w) sum += partial[threadIdx.x][w];
    part[s * N + n0 + threadIdx.x] = sum;
  }
}

// h[c] = mean_s sigmoid(U[s·H + c]·a) · xn[s·H + c]. Each block first issues its first batch of
// weight loads, then adds each row of down_inject's S parts in stream order into di (rounded to
// FP16, as the composition stores it) and makes a = silu(di[:R] / S) in shared memory (block 0
// also g = 2·sigmoid(di[R:] / S)). A lane group of kLanes a row of up (R values) reads its weights
// past L1; block b serves the (column, stream) pairs 256/kLanes·b.. in column-major order, so its
// columns are whole, and they meet in shared memory in stream order. xn is rebuilt from X and rstd
// exactly as the down kernel rounded it; with a last residual the group's first lane also stores
// X + g·y, the one write of each value of X (no other block reads it).
template <int kLanes>
__global__ void __launch_bounds__(kPreThreads)
    HcPreUpKernel(const float* __restrict__ part, __half* __restrict__ g, int N, const __half* __restrict__ U, float* X,
                  HcLastResidual last, const __half* __restrict__ nw, int nw_len, const float* __restrict__ rstd,
                  __half* __restrict__ h, int S, int H, int R) {
  constexpr int kRowsPerBlock = kPreThreads / kLanes, kLoads = 64 / kLanes;  // 64 runs (R = 512) a batch
  extern __shared__ uint4 a_shared[];  // a [R]
  __shared__ float contrib[kRowsPerBlock];
  const int grp = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
  const int j = blockIdx.x * kRowsPerBlock + grp, c = j / S, s = j % S;
  const bool live = c < H;
  const int ri = s * H + c, runs = R / 8;
  const uint4* row = reinterpret_cast<const uint4*>(U + static_cast<int64_t>(live ? ri : 0) * R);
  uint4 wv[kLoads];
  const auto load_weights = [&](int c0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int cc = c0 + u * kLanes;
      wv[u] = live && cc < runs ? gemv::LoadStreamed(row + cc) : make_uint4(0, 0, 0, 0);
    }
  };
  load_weights(l);
  __half* a = reinterpret_cast<__half*>(a_shared);
  for (int n = threadIdx.x; n < (blockIdx.x == 0 ? N : R); n += kPreThreads) {
    float sum = 0;
    for (int t = 0; t < S; ++t) sum += part[t * N + n];
    const float v = __half2float(__float2half(sum)) / static_cast<float>(S);  // di in FP16, as composed
    if (n < R) {
      a[n] = __float2half(Silu(v));
    } else {
      g[n - R] = __float2half(2.0f * Sigmoid(v));
    }
  }
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
  __syncthreads();  // a is whole

  float acc = 0;
  for (int c0 = l; c0 - l < runs; c0 += kLoads * kLanes) {
    if (c0 != l) load_weights(c0);
    uint4 av[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int cc = c0 + u * kLanes;
      av[u] = cc < runs ? a_shared[cc] : make_uint4(0, 0, 0, 0);
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

// The down kernel of kRows rows a block with lane_runs runs of its stream a thread.
template <int kRows>
void LaunchDown(int lane_runs, const float* X, HcLastResidual last, const __half* norm, int nw_len, const __half* W,
                float* part, float* rstd, int N, int S, int H, float eps, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(N, kRows)), static_cast<unsigned>(S));
  switch (lane_runs) {
#define Q38_HC_DOWN(L)                                                                                         \
  case L:                                                                                                      \
    HcPreDownKernel<kRows, L><<<grid, kPreThreads, 0, stream>>>(X, last, norm, nw_len, W, part, rstd, N, S, H, \
                                                                eps);                                          \
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

template <int kLanes>
void LaunchUp(const float* part, __half* g, int N, const __half* up, float* X, HcLastResidual last,
              const __half* norm, int nw_len, const float* rstd, __half* h, int S, int H, int R, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(CeilDiv(S * H, kPreThreads / kLanes));
  HcPreUpKernel<kLanes><<<blocks, kPreThreads, R * sizeof(__half), stream>>>(part, g, N, up, X, last, norm, nw_len,
                                                                             rstd, h, S, H, R);
}

}  // namespace

HcPreConfig HcPreChoose(int64_t S, int64_t H, int64_t R) {
  (void)S, (void)H;
  HcPreConfig c;
  // Measured on one H100 (hc_bench, run D3, 2026-12-06, a graph of 97 pre steps): at R = 320 (324
  // rows of K = 10,240) 4 rows a block take the pair 10.88 µs against 11.59 at 2 rows and 12.54
  // at 1; at R = 16 (20 rows) 2 rows a block are best (4.52 against 4.62 at 4). 16 lanes a row of
  // up were best or within 0.1 µs of 8 everywhere. Runs U1 and V1 (other H100s) had 8 lanes ahead
  // at the layer module (11.31 against 11.87 µs; 10.73 against 10.84), ~11 µs of a decode step at
  // most, which the model's ABAB cannot resolve; 16 stay.
  c.down_rows = R >= 256 ? 4 : 2;
  c.up_lanes = 16;
  return c;
}

bool HcPreFusedFits(int64_t S, int64_t H, int64_t R, int64_t norm_len, const void* X, const void* norm,
                    const void* down_inject, const void* up) {
  // A thread of the down kernel takes at most kMaxLaneRuns runs of its stream; the up kernel keeps
  // a [R] in shared memory.
  return S >= 1 && S <= kMaxStreams && kPreThreads / 16 % S == 0 && H >= 8 && H % 8 == 0 && R >= 8 && R % 8 == 0 &&
         R * static_cast<int64_t>(sizeof(__half)) <= 48 * 1024 && (norm_len == H || norm_len == S * H) &&
         H / 8 <= kMaxLaneRuns * kPreThreads && Aligned16(X) && Aligned16(norm) && Aligned16(down_inject) &&
         Aligned16(up);
}

int64_t HcPreScratchFloats(int64_t S, int64_t R, bool inject) { return S * (R + (inject ? S : 0)); }

void HcPreFusedDown(const HcPreConfig& config, const float* X, const __half* norm, int64_t norm_len,
                    const __half* down_inject, float* parts, float* rstd, int64_t S, int64_t H, int64_t R, bool inject,
                    float eps, cudaStream_t stream, HcLastResidual last) {
  const int N = static_cast<int>(R + (inject ? S : 0));
  const int lane_runs = static_cast<int>(CeilDiv(H / 8, kPreThreads));
  const int s = static_cast<int>(S), hh = static_cast<int>(H), nl = static_cast<int>(norm_len);
  switch (config.down_rows) {
    case 1: LaunchDown<1>(lane_runs, X, last, norm, nl, down_inject, parts, rstd, N, s, hh, eps, stream); break;
    case 2: LaunchDown<2>(lane_runs, X, last, norm, nl, down_inject, parts, rstd, N, s, hh, eps, stream); break;
    case 4: LaunchDown<4>(lane_runs, X, last, norm, nl, down_inject, parts, rstd, N, s, hh, eps, stream); break;
    default: LOG(FATAL) << "HcPreFused: " << config.down_rows << " down rows a block";
  }
  Q38_CUDA_LAUNCHED();
}

void HcPreFusedUp(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* up,
                  const float* parts, __half* g, const float* rstd, __half* h, int64_t S, int64_t H, int64_t R,
                  bool inject, cudaStream_t stream, HcLastResidual last) {
  const int N = static_cast<int>(R + (inject ? S : 0));
  const int s = static_cast<int>(S), hh = static_cast<int>(H), r = static_cast<int>(R), nl = static_cast<int>(norm_len);
  switch (config.up_lanes) {
    case 8: LaunchUp<8>(parts, g, N, up, X, last, norm, nl, rstd, h, s, hh, r, stream); break;
    case 16: LaunchUp<16>(parts, g, N, up, X, last, norm, nl, rstd, h, s, hh, r, stream); break;
    default: LOG(FATAL) << "HcPreFused: " << config.up_lanes << " up lanes a row";
  }
  Q38_CUDA_LAUNCHED();
}

void HcPreFused(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* down_inject,
                const __half* up, __half* h, __half* g, float* parts, float* rstd, int64_t S, int64_t H, int64_t R,
                bool inject, float eps, cudaStream_t stream, HcLastResidual last) {
  CHECK(HcPreFusedFits(S, H, R, norm_len, X, norm, down_inject, up)) << "HcPreFused: S " << S << " H " << H << " R " << R;
  CHECK(!inject || g != nullptr);
  CHECK(last.g == nullptr || (last.y != nullptr && Aligned16(last.y) && last.g != g))
      << "HcPreFused: the last residual needs y 16-byte aligned and gates other than the new ones";
  HcPreFusedDown(config, X, norm, norm_len, down_inject, parts, rstd, S, H, R, inject, eps, stream, last);
  HcPreFusedUp(config, X, norm, norm_len, up, parts, g, rstd, h, S, H, R, inject, stream, last);
}

void HcPreFused(float* X, const __half* norm, int64_t norm_len, const __half* down_inject, const __half* up, __half* h,
                __half* g, float* parts, float* rstd, int64_t S, int64_t H, int64_t R, bool inject, float eps,
                cudaStream_t stream, HcLastResidual last) {
  HcPreFused(HcPreChoose(S, H, R), X, norm, norm_len, down_inject, up, h, g, parts, rstd, S, H, R, inject, eps, stream,
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

bool HcResidualNormFits(int64_t S, int64_t H, int64_t norm_len, const void* X, const void* y, const void* norm,
                        const void* xn) {
  return H % 8 == 0 && (norm_len == H || norm_len == S * H) && Aligned16(X) && Aligned16(y) && Aligned16(norm) &&
         Aligned16(xn);
}

void HcResidualNorm(float* X, const __half* g, const __half* y, const __half* norm, int64_t norm_len, __half* xn,
                    int64_t T, int64_t S, int64_t H, float eps, cudaStream_t stream) {
  CHECK(HcResidualNormFits(S, H, norm_len, X, y, norm, xn)) << "HcResidualNorm: H " << H << ", norm of " << norm_len;
  HcResidualNormKernel<<<static_cast<unsigned>(T * S), kNormThreads, 0, stream>>>(X, g, y, norm, xn, S, H,
                                                                                  norm_len != H, eps);
  Q38_CUDA_LAUNCHED();
}

void HcResidual(float* X, const __half* g, const __half* y, int64_t T, int64_t S, int64_t H, cudaStream_t stream) {
  HcResidualKernel<<<TokenColumnGrid(T, H), kTokenColumnThreads, 0, stream>>>(X, g, y, T, S, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
