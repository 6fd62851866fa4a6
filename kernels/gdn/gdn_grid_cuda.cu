// A Gated DeltaNet mixer of one token as one kernel with two grid-wide barriers (gdn_cuda.h,
// GdnBlockGrid):
//  A. the stacked projection of h (qkv, z, b, a), a warp a row (grid_gemv);
//  B. (behind barrier 1) a block per (value head, 32 value columns), as GdnDeltaRuleKernel lays
//     it out: the causal conv of the head's q, k and its columns of v from the projection and the
//     conv state, the gates, the delta rule on the state slice; o to scratch;
//  C. (behind barrier 2) the conv state moves on a row (every block, a channel a thread, now that
//     no block still reads it), every block forms the whole gated RMSNorm y of o in its shared
//     memory, and the out projection's rows go a warp a row, their first loads issued before y
//     (where asked, each row's residual update with them).
// Rounds where the composition of ops rounds (the projection, the conv output, o, y, out to FP16;
// the gates and the state in FP32).
#include <cooperative_groups.h>

#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grid_gemv.cuh"
#include "kernels/cuda/grid_launch.h"
#include "kernels/gdn/gdn_cuda.h"
#include "kernels/gdn/gdn_rule.cuh"

namespace q38::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / kWarp;
constexpr int kStackRuns = 10;  // a projection row: H ≤ 2,560 in one batch
constexpr int kOutRuns = 12;    // an out row: Hv·dv = 6,144 in two batches
constexpr int kRuleWarps = 4;   // warps of the delta rule, each a quarter of the key rows
constexpr int kCols = 32;       // value columns of a block in B, one a lane
constexpr int kYRuns = 4;       // runs of 8 of o a thread in C: Hv·dv ≤ 8,192

struct Args {
  const __half* h;       // [H]
  const __half* in;      // [C + Z + 2·Hv, H]: qkv, z, b, a
  const __half* conv_w;  // [C, Kc]
  __half* conv_state;    // [Kc - 1, C]
  const float* a_log;    // [Hv]
  const float* dt_bias;  // [Hv]
  float* state;          // [Hv, dk, dv]
  const __half* norm_w;  // [dv]
  const __half* out_w;   // [H, Z]
  __half* proj;          // scratch [C + Z + 2·Hv]
  __half* o;             // scratch [Z]
  __half* out;           // [H]
  float* X;              // [S, H]: X += g·out as out is written (HcResidual), or null
  const __half* g;       // [S]
  int S;
  int H, C, Kc, Hk, Hv, dv;
  float eps;
  bool sigmoid_gate;
};

// Dynamic shared memory: h (phase A) and y (phase C) in 16-byte runs; the delta rule's floats.
struct Layout {
  int xs, ys, floats;
  __host__ __device__ Layout(int H, int Z) {
    xs = 0;
    ys = xs + H / 8;
    floats = (ys + Z / 8) * 4;
  }
};

// Channel c of the conv output, rounded to FP16 as the conv writes it: taps 0..Kc-2 on the state's
// rows, the last on this token (the projection, written by this kernel: read through L2).
__device__ __forceinline__ float ConvAt(const Args& p, int c) {
  float acc = 0;
  for (int k = 0; k < p.Kc; ++k) {
    const __half x = k < p.Kc - 1 ? p.conv_state[static_cast<int64_t>(k) * p.C + c] : __ldcg(p.proj + c);
    acc += __half2float(p.conv_w[static_cast<int64_t>(c) * p.Kc + k]) * __half2float(x);
  }
  return __half2float(__float2half(Silu(acc)));
}

// Brings the line holding p into L2 (behind a grid barrier, which empties L1, the next read of it
// then waits on L2 rather than on memory).
__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The conv taps of channel c: its weights and its history rows.
__device__ __forceinline__ void PrefetchConv(const Args& p, int c) {
  PrefetchL2(p.conv_w + static_cast<int64_t>(c) * p.Kc);
  for (int k = 0; k + 1 < p.Kc; ++k) PrefetchL2(p.conv_state + static_cast<int64_t>(k) * p.C + c);
}

template <int kDk>
__global__ void __launch_bounds__(kThreads, 2) GdnBlockGridKernel(Args p) {
  constexpr int kRows = kDk / kRuleWarps;
  extern __shared__ uint4 smem[];
  const int Z = p.Hv * p.dv, Nin = p.C + Z + 2 * p.Hv;
  const Layout at(p.H, Z);
  uint4* xs = smem + at.xs;
  uint4* ys = smem + at.ys;
  float* qs = reinterpret_cast<float*>(smem) + at.floats;
  float* ks = qs + kDk;
  float* part = ks + kDk;  // [kRuleWarps][kCols]
  float* norms = part + kRuleWarps * kCols;
  float* inv = norms + 2;  // [Hv]: each head's 1/rms in C
  const int b = blockIdx.x, G = gridDim.x, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int wg = b * kWarps + warp, W = G * kWarps;
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();

  // A. The projection. First its loads, and those B's first item needs that no block writes
  // before barrier 2: this block's slice of the recurrent state (raw, into registers) and the conv
  // taps of its channels (into L2).
  const int hruns = p.H / 8;
  grid_gemv::Batch<kStackRuns> stack;
  grid_gemv::Issue(stack, p.in, hruns, wg < Nin ? wg : -1, hruns, 0);
  const int col_blocks = p.dv / kCols, items = p.Hv * col_blocks;
  const bool rule = warp < kRuleWarps;
  float s[kRows];
  if (rule && b < items) {
    const int j = b / col_blocks, col = (b % col_blocks) * kCols + lane, kh = j / (p.Hv / p.Hk);
    const float* S = p.state + static_cast<int64_t>(j) * kDk * p.dv;
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = S[(warp * kRows + r) * p.dv + col];
    for (int i = threadIdx.x; i < kDk; i += kRuleWarps * kWarp) {
      PrefetchConv(p, kh * kDk + i);
      PrefetchConv(p, p.Hk * kDk + kh * kDk + i);
    }
    PrefetchConv(p, 2 * p.Hk * kDk + j * p.dv + col);
  }
  for (int c = threadIdx.x; c < hruns; c += kThreads) xs[c] = __ldg(reinterpret_cast<const uint4*>(p.h) + c);
  __syncthreads();
  grid_gemv::Rows(p.in, hruns, Nin, p.H, wg, W, stack, [&](int c) { return xs[c]; }, [&](int r, float dot) {
    if (lane == 0) p.proj[r] = __float2half(dot);
  });
  grid.sync();

  // B. The delta rule: block b takes (value head j, columns cb·32..) for it = b, b + G, …; its
  // first kRuleWarps warps compute, as GdnDeltaRuleKernel does for one token.
  for (int it = b; it < items; it += G) {
    const int j = it / col_blocks, col = (it % col_blocks) * kCols + lane, kh = j / (p.Hv / p.Hk);
    if (rule) {
      for (int i = threadIdx.x; i < kDk; i += kRuleWarps * kWarp) {
        qs[i] = ConvAt(p, kh * kDk + i);
        ks[i] = ConvAt(p, p.Hk * kDk + kh * kDk + i);
      }
    }
    __syncthreads();
    gdn::QkInvNorms<kDk>(qs, ks, norms);
    float mem = 0, v = 0, beta = 0, out = 0;
    float* S = p.state + static_cast<int64_t>(j) * kDk * p.dv;
    if (rule) {
      const float kn = norms[1];
      const float g = -expf(p.a_log[j]) * Softplus(__half2float(__ldcg(p.proj + p.C + Z + p.Hv + j)) + p.dt_bias[j]);
      const float decay = expf(g);
      beta = Sigmoid(__half2float(__ldcg(p.proj + p.C + Z + j)));
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (it != b) s[r] = S[(warp * kRows + r) * p.dv + col];  // the first item's came before barrier 1
        s[r] *= decay;
        mem += s[r] * ks[warp * kRows + r] * kn;
      }
      part[warp * kCols + lane] = mem;
      v = ConvAt(p, 2 * p.Hk * kDk + j * p.dv + col);
    }
    __syncthreads();
    if (rule) {
      mem = part[lane] + part[kCols + lane] + part[2 * kCols + lane] + part[3 * kCols + lane];
      const float delta = beta * (v - mem);
      const float qn = norms[0] * rsqrtf(static_cast<float>(kDk)), kn = norms[1];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s[r] += ks[warp * kRows + r] * kn * delta;
        out += s[r] * qs[warp * kRows + r] * qn;
        S[(warp * kRows + r) * p.dv + col] = s[r];
      }
    }
    __syncthreads();  // every warp has read part
    if (rule) part[warp * kCols + lane] = out;
    __syncthreads();
    if (warp == 0) {
      p.o[j * p.dv + col] = __float2half(part[lane] + part[kCols + lane] + part[2 * kCols + lane] + part[3 * kCols + lane]);
    }
    __syncthreads();  // q, k and part are rewritten for the next item
  }

  // C. First the out rows' loads; then y, the gated RMSNorm of o, in shared memory: o staged with
  // one 16-byte load a run, each head's 1/rms from it as GroupInvRms sums, y over o in place (a
  // thread rewrites the runs it staged), z from registers; then the out rows, and last the conv
  // state's move by a row (a channel a thread), which no block reads any more.
  const int zruns = Z / 8;
  grid_gemv::Batch<kOutRuns> outb;
  grid_gemv::Issue(outb, p.out_w, zruns, wg < p.H ? wg : -1, zruns, 0);
  grid.sync();
  uint4 zv[kYRuns];
#pragma unroll
  for (int u = 0; u < kYRuns; ++u) {
    const int c = threadIdx.x + kThreads * u;
    if (c < zruns) {
      ys[c] = __ldcg(reinterpret_cast<const uint4*>(p.o) + c);
      zv[u] = __ldcg(reinterpret_cast<const uint4*>(p.proj + p.C) + c);
    }
  }
  __syncthreads();
  const __half* o = reinterpret_cast<const __half*>(ys);
  for (int j = warp; j < p.Hv; j += kWarps) {
    float ss = 0;
    for (int i = lane; i < p.dv; i += kWarp) {
      const float x = __half2float(o[j * p.dv + i]);
      ss += x * x;
    }
    const float r = rsqrtf(WarpSum(ss) / p.dv + p.eps);
    if (lane == 0) inv[j] = r;
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kYRuns; ++u) {
    const int c = threadIdx.x + kThreads * u;
    if (c >= zruns) continue;
    const __half2* oh = reinterpret_cast<const __half2*>(&ys[c]);
    const __half2* zh = reinterpret_cast<const __half2*>(&zv[u]);
    uint4 y;
    __half2* yh = reinterpret_cast<__half2*>(&y);
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // a run lies in one head: dv is a multiple of 8
      const float2 of = __half22float2(oh[e]), zf = __half22float2(zh[e]);
      const int i0 = (8 * c + 2 * e) % p.dv, j = (8 * c + 2 * e) / p.dv;
      const float g0 = p.sigmoid_gate ? Sigmoid(zf.x) : Silu(zf.x), g1 = p.sigmoid_gate ? Sigmoid(zf.y) : Silu(zf.y);
      yh[e] = __floats2half2_rn(of.x * inv[j] * __half2float(p.norm_w[i0]) * g0,
                                of.y * inv[j] * __half2float(p.norm_w[i0 + 1]) * g1);
    }
    ys[c] = y;
  }
  __syncthreads();
  grid_gemv::Rows(p.out_w, zruns, p.H, Z, wg, W, outb, [&](int c) { return ys[c]; }, [&](int r, float dot) {
    const __half y = __float2half(dot);
    if (lane == 0) p.out[r] = y;
    if (p.X != nullptr && lane < p.S) p.X[static_cast<int64_t>(lane) * p.H + r] += __half2float(p.g[lane]) * __half2float(y);
  });
  const int hist = p.Kc - 1;
  for (int c = b * kThreads + threadIdx.x; c < p.C; c += G * kThreads) {
    // Row i takes row i + 1 in ascending order (each read before it is overwritten), the last this token.
    for (int i = 0; i + 1 < hist; ++i) {
      p.conv_state[static_cast<int64_t>(i) * p.C + c] = p.conv_state[static_cast<int64_t>(i + 1) * p.C + c];
    }
    p.conv_state[static_cast<int64_t>(hist - 1) * p.C + c] = __ldcg(p.proj + c);
  }
}

// The kernel for key_dim, or null.
using KernelFn = void (*)(Args);
KernelFn ForKeyDim(int64_t dk) {
  switch (dk) {
    case 16: return GdnBlockGridKernel<16>;
    case 32: return GdnBlockGridKernel<32>;
    case 64: return GdnBlockGridKernel<64>;
    case 128: return GdnBlockGridKernel<128>;
    default: return nullptr;
  }
}

// The layout's runs, then the delta rule's q, k, the warps' partials and the two norms, then the
// heads' 1/rms.
size_t SharedBytes(int64_t H, int64_t Z, int64_t dk, int64_t Hv) {
  return (Layout(static_cast<int>(H), static_cast<int>(Z)).floats + 2 * dk + kRuleWarps * kCols + 2 + Hv) *
         sizeof(float);
}

}  // namespace

bool GdnBlockGridFits(const GdnBlockDims& d, const void* h, const void* in, const void* out_w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const KernelFn kernel = ForKeyDim(d.key_dim);
  const int64_t Z = d.value_heads * d.value_dim;
  if (kernel == nullptr || d.key_heads < 1 || d.value_heads % d.key_heads != 0 || d.value_dim % kCols != 0) return false;
  if (d.conv_taps < 2 || d.conv_taps - 1 > kConvMaxHistory || d.H % 8 != 0 || Z > 8 * kThreads * kYRuns) return false;
  if (d.channels != 2 * d.key_heads * d.key_dim + Z || !aligned(h) || !aligned(in) || !aligned(out_w)) return false;
  if (d.streams < 0 || d.streams > kWarp) return false;  // a lane a stream in the residual update
  const size_t smem = SharedBytes(d.H, Z, d.key_dim, d.value_heads);
  return smem <= DynamicSharedLimit(kernel) && CoResidentBlocks(kernel, kThreads, smem) > 0;
}

void GdnBlockGrid(const GdnBlockDims& d, const GdnBlockOperands& x, cudaStream_t stream) {
  CHECK(GdnBlockGridFits(d, x.h, x.in, x.out_w)) << "GdnBlockGrid: H " << d.H << " dk " << d.key_dim;
  const int64_t Z = d.value_heads * d.value_dim;
  const KernelFn kernel = ForKeyDim(d.key_dim);
  const size_t smem = SharedBytes(d.H, Z, d.key_dim, d.value_heads);
  const Args args{x.h,       x.in,       x.conv_w,
                  x.conv_state, x.a_log, x.dt_bias,
                  x.state,   x.norm_w,   x.out_w,
                  x.proj,    x.o,        x.out,
                  x.X,       x.g,        static_cast<int>(d.streams),
                  static_cast<int>(d.H), static_cast<int>(d.channels), static_cast<int>(d.conv_taps),
                  static_cast<int>(d.key_heads), static_cast<int>(d.value_heads), static_cast<int>(d.value_dim),
                  d.eps, d.sigmoid_gate};
  LaunchCooperative(kernel, CoResidentBlocks(kernel, kThreads, smem), kThreads, smem, stream, args);
}

}  // namespace q38::cuda
