// The one-token MoE block as one kernel with two grid-wide barriers (moe_cuda.h, MoeBlockGrid):
//  A. the stacked projection of h (router logits, the shared expert's gate|up and gate logit), a
//     warp a row; meanwhile each block's rows of the shared expert's down projection are loaded;
//  B. (behind barrier 1) every block routes the token itself (moe_route.cuh: the router kernel's
//     code, so every block chooses the same experts), forms the shared expert's silu(gate)·up,
//     dots its already loaded shared-down rows, and takes its share of the routed experts'
//     gate/up rows; then it loads the first of its routed down rows for C;
//  C. (behind barrier 2) each block's output rows: the routed experts' down rows, their weighted
//     sum, plus sigmoid(gate)·shared; and where asked, the residual update of those rows.
// Output row n belongs to block n mod G in B and C alike, so the shared expert's value for it
// never leaves the block. Rounds where the composition of ops rounds (the projection, silu·up,
// the shared expert's output and the routed sum to FP16); sums in a fixed order that does not
// depend on the number of blocks.
#include <cooperative_groups.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grid_gemv.cuh"
#include "kernels/cuda/grid_launch.h"
#include "kernels/linear/linear_gemv.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_decode.cuh"
#include "kernels/moe/moe_route.cuh"

namespace q38::cuda {
namespace {

using moe_decode::Nvfp4Rows;
using moe_decode::XPiece;

constexpr int kThreads = 256, kWarps = kThreads / kWarp;
// A stacked-projection row: a warp, kStackRuns runs of 8 a lane (H ≤ 2,560 in one pass). A
// shared-down row: kSharedLanes lanes of kSharedRuns runs (Is ≤ 640 in one pass).
constexpr int kStackRuns = 10, kSharedLanes = 16, kSharedRuns = 5;
constexpr int kMaxK = 16;

struct Args {
  const __half* h;            // [H]
  const __half* in;           // [E + 2·Is + 1, H]
  const __half* shared_down;  // [H, Is]
  Nvfp4Rows gate_up, down;    // [E, 2I, H], [E, H, I]
  __half* proj;               // scratch [E + 2·Is + 1]
  __half* act;                // scratch [k, I]
  __half* out;                // [H]
  float* X;                   // [S, H]: X += g·out as out is written (HcResidual), or null
  const __half* g;            // [S]
  int S;
  int H, E, k, Is, I;
  int rows_per_block;         // output rows n = b + G·m, m < rows_per_block
  int gu_lanes, down_lanes;   // lanes a row: ChunkLanes(H), ChunkLanes(I)
};

// Dynamic shared memory, in 16-byte units: x (h, rotated as moe_decode's StageX lays it), every
// pair's act (likewise), the shared act, then floats: the shared expert's outputs, the pairs'
// down outputs, the router's scratch; the chosen ids and weights.
struct Layout {
  int xs, acts, act_s, shared_out, pair_out, chosen, idx, w, bytes;
  __host__ __device__ Layout(int H, int k, int Is, int I, int rows_per_block) {
    xs = 0;
    acts = xs + H / 8;
    act_s = acts + k * I / 8;
    const int floats = act_s + Is / 8;  // in uint4
    shared_out = floats * 4;            // in floats from here on
    pair_out = shared_out + rows_per_block;
    chosen = pair_out + rows_per_block * k;
    idx = chosen + k;
    w = idx + k;  // w: k halves
    bytes = w * 4 + 2 * k;
  }
};

__global__ void __launch_bounds__(kThreads, 2) MoeBlockGridKernel(Args p) {
  extern __shared__ uint4 smem[];
  const Layout at(p.H, p.k, p.Is, p.I, p.rows_per_block);
  uint4* xs = smem + at.xs;
  uint4* acts = smem + at.acts;
  uint4* act_s = smem + at.act_s;
  float* f = reinterpret_cast<float*>(smem);
  float* shared_out = f + at.shared_out;
  float* pair_out = f + at.pair_out;
  int32_t* sidx = reinterpret_cast<int32_t*>(f + at.idx);
  __half* sw = reinterpret_cast<__half*>(f + at.w);
  const int b = blockIdx.x, G = gridDim.x, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int H = p.H, hruns = H / 8, Nin = p.E + 2 * p.Is + 1, sruns = p.Is / 8;
  const __half* gu = p.proj + p.E;  // the shared expert's gate|up
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();

  // A. First the loads: this warp's first stack row, and this block's first shared-down rows
  // (rows m of a warp step: two groups of kSharedLanes a warp).
  const int wg = b * kWarps + warp, W = G * kWarps;
  grid_gemv::Batch<kStackRuns> stack;
  grid_gemv::Issue(stack, p.in, hruns, wg < Nin ? wg : -1, hruns, 0);
  constexpr int kSharedGroups = kWarp / kSharedLanes;
  const int sq = lane % kSharedLanes;
  auto shared_row = [&](int m0) { return m0 + lane / kSharedLanes; };
  auto shared_live = [&](int m) { return m < p.rows_per_block && b + G * m < H; };
  uint4 sd[kSharedRuns];
  {
    const int m = shared_row(warp * kSharedGroups);
    const bool live = shared_live(m);
    const uint4* row = reinterpret_cast<const uint4*>(p.shared_down) + static_cast<int64_t>(live ? b + G * m : 0) * sruns;
#pragma unroll
    for (int u = 0; u < kSharedRuns; ++u) {
      const int c = sq + kSharedLanes * u;
      sd[u] = live && c < sruns ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
    }
  }
  moe_decode::StageX(p.h, H, xs);
  __syncthreads();
  grid_gemv::Rows(p.in, hruns, Nin, H, wg, W, stack, [&](int c) { return xs[XPiece(c / 4, c % 4)]; },
                  [&](int r, float dot) {
                    if (lane == 0) p.proj[r] = __float2half(dot);
                  });
  grid.sync();

  // B. Route (warp 0) while the other warps form the shared act.
  if (warp == 0) {
    moe_route::RouteToken(p.proj, p.E, p.k, f + at.chosen, sidx, sw);
  } else {
    __half* a = reinterpret_cast<__half*>(act_s);
    for (int c = threadIdx.x - kWarp; c < p.Is; c += kThreads - kWarp) {
      a[c] = __float2half(Silu(__half2float(__ldcg(gu + c))) * __half2float(__ldcg(gu + p.Is + c)));
    }
  }
  __syncthreads();
  // The shared expert's down rows of this block, the first from the loads of A.
  for (int m0 = warp * kSharedGroups, first = 1; m0 < p.rows_per_block; m0 += kWarps * kSharedGroups, first = 0) {
    const int m = shared_row(m0);
    const bool live = shared_live(m);
    const uint4* row = reinterpret_cast<const uint4*>(p.shared_down) + static_cast<int64_t>(live ? b + G * m : 0) * sruns;
    float acc = 0;
    for (int base = 0; base < sruns; base += kSharedLanes * kSharedRuns) {
      if (!(first && base == 0)) {
#pragma unroll
        for (int u = 0; u < kSharedRuns; ++u) {
          const int c = base + sq + kSharedLanes * u;
          sd[u] = live && c < sruns ? gemv::LoadStreamed(row + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kSharedRuns; ++u) {
        const int c = base + sq + kSharedLanes * u;
        if (c < sruns) acc += Dot8Halves(sd[u], act_s[c]);
      }
    }
    for (int o = kSharedLanes / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (live && sq == 0) shared_out[m] = __half2float(__float2half(acc));  // as Linear's FP16 output
  }
  // The routed experts' gate/up: unit u = j·I + i (pair j, intermediate row i), a group of
  // gu_lanes lanes a unit, the grid's groups in turn; every lane of a warp steps together.
  {
    const int L = p.gu_lanes, per_warp = kWarp / L, ql = lane % L, units = p.k * p.I, chunks = H / 32;
    for (int u0 = wg * per_warp; u0 < units; u0 += W * per_warp) {
      const int u = u0 + lane / L;
      const bool live = u < units;
      const int j = live ? u / p.I : 0, i = live ? u % p.I : 0;
      const int64_t e = sidx[j], n = e * 2 * p.I + i;
      const moe_decode::RowChunks g = moe_decode::LoadRowChunks(p.gate_up, live ? n : -1, ql, L);
      const moe_decode::RowChunks v = moe_decode::LoadRowChunks(p.gate_up, live ? n + p.I : -1, ql, L);
      float dg = moe_decode::RowChunksDot(g, xs, ql, L, chunks), du = moe_decode::RowChunksDot(v, xs, ql, L, chunks);
      for (int o = L / 2; o > 0; o >>= 1) {
        dg += __shfl_xor_sync(0xffffffffu, dg, o);
        du += __shfl_xor_sync(0xffffffffu, du, o);
      }
      if (live && ql == 0) {
        const float gate = dg * Nvfp4Rows::kUnscale * p.gate_up.Global(e, i);
        const float up = du * Nvfp4Rows::kUnscale * p.gate_up.Global(e, p.I + i);
        p.act[u] = __float2half(Silu(gate) * up);
      }
    }
  }
  // C. This block's output rows: unit (m, j) a group of down_lanes lanes. The routed experts being
  // known, each group's first unit is loaded before barrier 2; behind it, every pair's act.
  const int dl = p.down_lanes, per_warp = kWarp / dl, dq = lane % dl, down_units = p.rows_per_block * p.k;
  const auto down_unit = [&](int u0, int& u, int& j, int& n) {
    u = u0 + lane / dl;
    j = u % p.k;
    n = b + G * (u / p.k);
    return u < down_units && n < H;
  };
  moe_decode::RowChunks first;
  {
    int u, j, n;
    const bool live = down_unit(warp * per_warp, u, j, n);
    first = moe_decode::LoadRowChunks(p.down, live ? int64_t{sidx[j]} * H + n : -1, dq, dl);
  }
  grid.sync();

  for (int j = 0; j < p.k; ++j) moe_decode::StageX(p.act + j * p.I, p.I, acts + j * (p.I / 8));
  __syncthreads();
  {
    const int L = dl, ql = dq;
    for (int u0 = warp * per_warp; u0 < down_units; u0 += kWarps * per_warp) {
      int u, j, n;
      const bool live = down_unit(u0, u, j, n);
      const int64_t e = live ? sidx[j] : 0;
      const moe_decode::RowChunks r =
          u0 == warp * per_warp ? first : moe_decode::LoadRowChunks(p.down, live ? e * H + n : -1, ql, L);
      float dot = moe_decode::RowChunksDot(r, acts + (live ? j : 0) * (p.I / 8), ql, L, p.I / 32);
      for (int o = L / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (live && ql == 0) pair_out[u] = dot * Nvfp4Rows::kUnscale * p.down.Global(e, n);
    }
  }
  __syncthreads();
  // The weighted sum in pair order and the gated shared expert, as CombineKernel rounds them.
  const float gate = Sigmoid(__half2float(__ldcg(p.proj + p.E + 2 * p.Is)));
  for (int m = threadIdx.x; m < p.rows_per_block; m += kThreads) {
    const int n = b + G * m;
    if (n >= H) break;
    float acc = 0;
    for (int j = 0; j < p.k; ++j) acc += __half2float(sw[j]) * pair_out[m * p.k + j];
    const __half y = __float2half(__half2float(__float2half(acc)) + gate * shared_out[m]);
    p.out[n] = y;
    for (int s = 0; p.X != nullptr && s < p.S; ++s) p.X[static_cast<int64_t>(s) * H + n] += __half2float(p.g[s]) * __half2float(y);
  }
}

// The launch shape: blocks (as many as are resident at once, at least one an SM) and the shared
// memory for the rows a block takes at that many; blocks = 0 where it does not fit.
struct Shape {
  int blocks = 0, rows_per_block = 0;
  size_t smem = 0;
};
Shape GridShape(int64_t H, int64_t k, int64_t Is, int64_t I) {
  int device = 0, sms = 0;
  Q38_CUDA_CHECK(cudaGetDevice(&device));
  Q38_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  Shape s;
  // Sized for one block an SM, the most rows a block can take once every SM has one.
  const int most_rows = static_cast<int>(CeilDiv(H, sms));
  s.smem = Layout(static_cast<int>(H), static_cast<int>(k), static_cast<int>(Is), static_cast<int>(I), most_rows).bytes;
  if (s.smem > DynamicSharedLimit(MoeBlockGridKernel)) return s;
  const int blocks = CoResidentBlocks(MoeBlockGridKernel, kThreads, s.smem);
  if (blocks < sms) return s;
  s.blocks = blocks;
  s.rows_per_block = static_cast<int>(CeilDiv(H, blocks));
  return s;
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

bool MoeBlockGridFits(const __half* h, const __half* in, const __half* shared_down, const ExpertProjection& gate_up,
                      const ExpertProjection& down, int64_t H, int64_t E, int64_t k, int64_t Is) {
  const int64_t I = down.K;
  if (gate_up.dense != nullptr || gate_up.K != H || gate_up.N != 2 * I || down.N != H) return false;
  if (E > moe_route::kMaxExperts || k < 1 || k > kMaxK || k > E || Is < 8 || Is % 8 != 0) return false;
  if (moe_decode::ChunkLanes(H) < 1 || moe_decode::ChunkLanes(I) < 1) return false;
  if (!Aligned(h, 16) || !Aligned(in, 16) || !Aligned(shared_down, 16)) return false;
  if (!moe_decode::ChunksFit(Nvfp4Rows::Of(gate_up)) || !moe_decode::ChunksFit(Nvfp4Rows::Of(down))) return false;
  return GridShape(H, k, Is, I).blocks > 0;
}

void MoeBlockGrid(const __half* h, const __half* in, const __half* shared_down, const ExpertProjection& gate_up,
                  const ExpertProjection& down, __half* out, MoeBlockScratch scratch, int64_t H, int64_t E, int64_t k,
                  int64_t Is, cudaStream_t stream, GridResidual residual) {
  CHECK(MoeBlockGridFits(h, in, shared_down, gate_up, down, H, E, k, Is)) << "MoeBlockGrid: H " << H << " E " << E;
  const int64_t I = down.K;
  const Shape s = GridShape(H, k, Is, I);
  const Args args{h,
                  in,
                  shared_down,
                  Nvfp4Rows::Of(gate_up),
                  Nvfp4Rows::Of(down),
                  scratch.proj,
                  scratch.act,
                  out,
                  residual.X,
                  residual.g,
                  static_cast<int>(residual.S),
                  static_cast<int>(H),
                  static_cast<int>(E),
                  static_cast<int>(k),
                  static_cast<int>(Is),
                  static_cast<int>(I),
                  s.rows_per_block,
                  moe_decode::ChunkLanes(H),
                  moe_decode::ChunkLanes(I)};
  LaunchCooperative(MoeBlockGridKernel, s.blocks, kThreads, s.smem, stream, args);
}

}  // namespace q38::cuda
