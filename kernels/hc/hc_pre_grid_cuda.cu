// The one-token hyper-connection pre step as one kernel with a grid-wide barrier (hc_cuda.h,
// HcPreGrid). Every block issues the loads of its share of both weight matrices first, down/inject
// and up alike, so the whole step's 13 MB (at the model's widths) is in flight at once; the up
// weights wait in registers through the barrier, behind which the low-rank vector a is known.
#include <cooperative_groups.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grid_gemv.cuh"
#include "kernels/cuda/grid_launch.h"
#include "kernels/hc/hc_cuda.h"
#include "kernels/linear/linear_gemv.cuh"

namespace q38::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / kWarp;
// A down/inject row's slice of one stream, a warp a row (grid_gemv): kDownRuns runs of 8 a lane
// in flight (H ≤ 2,560 in one pass). Up rows, a lane group of kUpLanes a row: kUpRuns runs a lane (R ≤ 320
// in one pass) and kUpSlots rows a group at once.
constexpr int kDownRuns = 10, kUpLanes = 8, kUpRuns = 5, kUpSlots = 2;
constexpr int kGroups = kThreads / kUpLanes, kUnitsAPass = kGroups * kUpSlots;
constexpr int kMaxStreams = 8;

struct Args {
  const float* X;
  const __half* nw;
  int nw_len;
  const __half* W;  // down_inject [N, S·H]
  const __half* U;  // up [S·H, R]
  __half* h;
  __half* g;
  float* partial;  // [N, S]: row n's dot over stream s
  float* rstd;     // [S]
  int N, R, S, H;
  float eps;
};

// The block's up rows: unit i is column c = blockIdx.x + gridDim.x·(i / S) of stream i % S; a
// pass takes kUnitsAPass / S whole columns, unit i of a pass in slot i / kGroups of group i % kGroups.
struct UpRows {
  uint4 w[kUpSlots][kUpRuns];
};
__device__ __forceinline__ int UpColumn(int unit, int S) { return blockIdx.x + gridDim.x * (unit / S); }

__device__ __forceinline__ UpRows LoadUp(const Args& p, int pass_unit0, int units, int run0, int group, int gl) {
  UpRows r;
  const int runs = p.R / 8;
#pragma unroll
  for (int k = 0; k < kUpSlots; ++k) {
    const int unit = pass_unit0 + group + kGroups * k;
    const bool live = unit < units;
    const int s = unit % p.S;
    const uint4* row = reinterpret_cast<const uint4*>(p.U) +
                       static_cast<int64_t>(live ? s * p.H + UpColumn(unit, p.S) : 0) * runs;
#pragma unroll
    for (int u = 0; u < kUpRuns; ++u) {
      const int c = run0 + gl + kUpLanes * u;
      r.w[k][u] = live && c < runs ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
  }
  return r;
}

// xn of element e = s·H + c, rounded to FP16 as every kernel of the step rounds it.
__device__ __forceinline__ __half2 NormPair(float x0, float x1, float rs, __half2 w) {
  const float2 wf = __half22float2(w);
  return __floats2half2_rn(x0 * (rs * (1.0f + wf.x)), x1 * (rs * (1.0f + wf.y)));
}

__global__ void __launch_bounds__(kThreads, 2) HcPreGridKernel(Args p) {
  extern __shared__ uint4 smem[];
  const int S = p.S, H = p.H, hruns = H / 8, rruns = p.R / 8;
  uint4* xs = smem;                                          // [H / 8]: this block's stream of xn
  uint4* as = smem + hruns;                                  // [R / 8]: a, behind the barrier
  float* contrib = reinterpret_cast<float*>(as + rruns);     // [kUnitsAPass]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int group = threadIdx.x / kUpLanes, gl = threadIdx.x % kUpLanes;
  // Down: block b takes stream s = b % S of rows q, q + Q, ... (Q = gridDim.x / S row slots).
  const int slots = gridDim.x / S, s = blockIdx.x % S, q = blockIdx.x / S;
  const bool has_down = q < slots;
  const int units = blockIdx.x < H ? ((H - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1) * S : 0;

  // 1. Every first load: this warp's first down row (its stream's slice), the first pass of up.
  // Row n's slice of stream s starts s·H/8 runs into the row, rows S·H/8 runs apart.
  const __half* Ws = p.W + static_cast<int64_t>(s) * H;
  const int n0 = q + slots * warp;
  grid_gemv::Batch<kDownRuns> dw;
  grid_gemv::Issue(dw, Ws, int64_t{S} * hruns, has_down && n0 < p.N ? n0 : -1, hruns, 0);
  const UpRows up0 = LoadUp(p, 0, units, 0, group, gl);

  // 2. This block's stream: the sum of squares in a fixed order (every block of the stream gets the
  // same rstd), then xn into shared memory.
  const float* Xs = p.X + static_cast<int64_t>(s) * H;
  float ss = 0;
  for (int c = threadIdx.x; c < hruns; c += kThreads) {
    float x[8];
    LoadF<8>(Xs + 8 * c, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += x[j] * x[j];
  }
  const float rs = rsqrtf(BlockSum(ss) / H + p.eps);
  if (q == 0 && threadIdx.x == 0) p.rstd[s] = rs;
  for (int c = threadIdx.x; c < hruns; c += kThreads) {
    float x[8];
    LoadF<8>(Xs + 8 * c, x);
    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(p.nw + (s * H + 8 * c) % p.nw_len));
    const __half2* wh = reinterpret_cast<const __half2*>(&wv);
    uint4 o;
    __half2* oh = reinterpret_cast<__half2*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) oh[i] = NormPair(x[2 * i], x[2 * i + 1], rs, wh[i]);
    xs[c] = o;
  }
  __syncthreads();

  // 3. The down/inject dots of this stream: the first row from the loads above.
  if (has_down) {
    grid_gemv::Rows(Ws, int64_t{S} * hruns, p.N, H, n0, slots * kWarps, dw, [&](int c) { return xs[c]; },
                    [&](int n, float dot) {
                      if (lane == 0) p.partial[static_cast<int64_t>(n) * S + s] = dot;
                    });
  }

  cooperative_groups::this_grid().sync();

  // 4. a = silu(di / S) from the partials in stream order, di rounded to FP16 as the composition
  // stores it; block 0 also writes the gates g of the inject rows.
  for (int n = threadIdx.x; n < p.R; n += kThreads) {
    float di = 0;
    for (int t = 0; t < S; ++t) di += __ldcg(p.partial + static_cast<int64_t>(n) * S + t);
    reinterpret_cast<__half*>(as)[n] = __float2half(Silu(__half2float(__float2half(di)) / S));
  }
  if (blockIdx.x == 0 && p.g != nullptr) {
    for (int j = threadIdx.x; p.R + j < p.N; j += kThreads) {
      float di = 0;
      for (int t = 0; t < S; ++t) di += __ldcg(p.partial + static_cast<int64_t>(p.R + j) * S + t);
      p.g[j] = __float2half(2.0f * Sigmoid(__half2float(__float2half(di)) / S));
    }
  }
  __syncthreads();

  // 5. Up: m = U·a a row, sigmoid(m)·xn per (column, stream), h = their mean in stream order.
  for (int unit0 = 0; unit0 < units; unit0 += kUnitsAPass) {
    float acc[kUpSlots] = {};
    for (int run0 = 0; run0 < rruns; run0 += kUpLanes * kUpRuns) {
      const UpRows w = unit0 == 0 && run0 == 0 ? up0 : LoadUp(p, unit0, units, run0, group, gl);
#pragma unroll
      for (int k = 0; k < kUpSlots; ++k) {
#pragma unroll
        for (int u = 0; u < kUpRuns; ++u) {
          const int c = run0 + gl + kUpLanes * u;
          if (c < rruns) acc[k] += Dot8Halves(w.w[k][u], as[c]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kUpSlots; ++k) {
#pragma unroll
      for (int o = kUpLanes / 2; o > 0; o >>= 1) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], o);
      const int i = group + kGroups * k, unit = unit0 + i;
      if (gl == 0 && i < kUnitsAPass && unit < units) {
        const int st = unit % S, e = st * H + UpColumn(unit, S);
        const float x = p.X[e], rst = __ldcg(p.rstd + st);
        const float xn = __half2float(__float2half(x * (rst * (1.0f + __half2float(p.nw[e % p.nw_len])))));
        contrib[i] = Sigmoid(__half2float(__float2half(acc[k]))) * xn;  // m rounded to FP16 first
      }
    }
    __syncthreads();
    const int cols = min(kUnitsAPass, units - unit0) / S;
    if (threadIdx.x < cols) {
      float sum = 0;
      for (int t = 0; t < S; ++t) sum += contrib[threadIdx.x * S + t];
      p.h[UpColumn(unit0 + threadIdx.x * S, S)] = __float2half(sum / S);
    }
    __syncthreads();
  }
}

size_t SharedBytes(int64_t H, int64_t R) { return (H + R) * sizeof(__half) + kUnitsAPass * sizeof(float); }

// Blocks for a shape: as many as are resident at once, a whole number a stream; 0 where the device
// cannot launch cooperatively or holds fewer blocks than streams.
int GridBlocks(int64_t S, int64_t H, int64_t R) {
  const int resident = CoResidentBlocks(HcPreGridKernel, kThreads, SharedBytes(H, R));
  return static_cast<int>(resident / S * S);
}

}  // namespace

bool HcPreGridFits(int64_t S, int64_t H, int64_t R, int64_t norm_len, const void* X, const void* norm,
                   const void* down_inject, const void* up) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return S >= 1 && S <= kMaxStreams && kUnitsAPass % S == 0 && H >= 8 && H % 8 == 0 && R >= 8 && R % 8 == 0 &&
         (norm_len == H || norm_len == S * H) && aligned(X) && aligned(norm) && aligned(down_inject) && aligned(up) &&
         SharedBytes(H, R) <= DynamicSharedLimit(HcPreGridKernel) && GridBlocks(S, H, R) >= S;
}

void HcPreGrid(const float* X, const __half* norm, int64_t norm_len, const __half* down_inject, const __half* up,
               __half* h, __half* g, float* partial, float* rstd, int64_t S, int64_t H, int64_t R, bool inject,
               float eps, cudaStream_t stream) {
  CHECK(HcPreGridFits(S, H, R, norm_len, X, norm, down_inject, up)) << "HcPreGrid: S " << S << " H " << H << " R " << R;
  CHECK(!inject || g != nullptr);
  const Args args{X,
                  norm,
                  static_cast<int>(norm_len),
                  down_inject,
                  up,
                  h,
                  inject ? g : nullptr,
                  partial,
                  rstd,
                  static_cast<int>(R + (inject ? S : 0)),
                  static_cast<int>(R),
                  static_cast<int>(S),
                  static_cast<int>(H),
                  eps};
  LaunchCooperative(HcPreGridKernel, GridBlocks(S, H, R), kThreads, SharedBytes(H, R), stream, args);
}

}  // namespace q38::cuda
