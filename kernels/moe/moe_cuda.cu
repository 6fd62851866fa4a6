#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_pipeline.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_decode.cuh"

namespace q38::cuda {
namespace {

constexpr int kRouterTokensPerBlock = 4, kRouterPerLane = 16;
constexpr int kExpertTileRows = 64;  // pairs a grouped-GEMM tile takes of one expert
constexpr int64_t kRouterMaxExperts = int64_t{kWarp} * kRouterPerLane;

// (v, e) beats (ov, oe): the larger probability, ties to the lower expert id.
__device__ __forceinline__ bool Beats(float v, int e, float ov, int oe) { return v > ov || (v == ov && e < oe); }

// One warp per token, its E ≤ 512 probabilities in registers (lane l holds experts l, l + 32, …):
// softmax over the experts in FP32, then k rounds of a warp argmax over each lane's best, ties to
// the lower id; only the round's winner rescans its own values. Weights are renormalized over
// the chosen. (The probabilities in shared memory, every lane rescanning its share each round,
// took ~10 µs a call at E = 512, k = 10.)
__global__ void __launch_bounds__(kRouterTokensPerBlock * kWarp)
    RouterKernel(const __half* __restrict__ logits, int32_t* __restrict__ idx, __half* __restrict__ w, int64_t T,
                 int64_t E, int64_t k) {
  extern __shared__ float chosen[];  // k per warp
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouterTokensPerBlock + warp;
  if (t >= T) return;  // whole warps leave; nothing below waits on the block
  float p[kRouterPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) {
    const int64_t e = lane + int64_t{kWarp} * s;
    p[s] = e < E ? __half2float(logits[t * E + e]) : -INFINITY;
    mx = fmaxf(mx, p[s]);
  }
  mx = WarpMax(mx);
  float sum = 0;
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) sum += (p[s] = expf(p[s] - mx));  // exp(-inf) = 0 past E
  sum = WarpSum(sum);
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) p[s] = lane + kWarp * s < E ? p[s] / sum : -1.0f;  // below every probability
  // This lane's best: scanning ascending ids keeps the first of equals.
  auto best = [&](float& v, int& e) {
    v = -2.0f;
    e = INT_MAX;
#pragma unroll
    for (int s = 0; s < kRouterPerLane; ++s) {
      if (p[s] > v) {
        v = p[s];
        e = lane + kWarp * s;
      }
    }
  };
  float v;
  int i;
  best(v, i);
  float* mine = chosen + warp * k;
  float top = 0;
  for (int64_t j = 0; j < k; ++j) {
    float bv = v;
    int bi = i;
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (Beats(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    // Every lane now holds the same (bv, bi).
    top += bv;
    if (lane == 0) {
      idx[t * k + j] = bi;
      mine[j] = bv;
    }
    if (bi % kWarp == lane) {
#pragma unroll
      for (int s = 0; s < kRouterPerLane; ++s) {
        if (lane + kWarp * s == bi) p[s] = -1.0f;  // taken, like the padding
      }
      best(v, i);
    }
  }
  __syncwarp();
  for (int64_t j = lane; j < k; j += kWarp) w[t * k + j] = __float2half(mine[j] / top);
}

// out[t, n] = Σ_j w[t, j] · pair_out[t·k + j, n], in a fixed order; then the gated shared expert
// as AddSigmoidGatedKernel adds it. The first kCombineLoads pairs' values are loaded before the
// sum, so that they cost one memory round trip rather than one each.
constexpr int kCombineLoads = 16;
__global__ void CombineKernel(const float* __restrict__ pair_out, const __half* __restrict__ w,
                              __half* __restrict__ out, int64_t T, int64_t k, int64_t H, GatedShared shared) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, n = i % H;
  float wv[kCombineLoads], pv[kCombineLoads];
#pragma unroll
  for (int j = 0; j < kCombineLoads; ++j) {
    if (j < k) {
      wv[j] = __half2float(w[t * k + j]);
      pv[j] = pair_out[(t * k + j) * H + n];
    }
  }
  float acc = 0;
#pragma unroll
  for (int j = 0; j < kCombineLoads; ++j) {
    if (j < k) acc += wv[j] * pv[j];
  }
  for (int64_t j = kCombineLoads; j < k; ++j) acc += __half2float(w[t * k + j]) * pair_out[(t * k + j) * H + n];
  __half routed = __float2half(acc);
  if (shared.out != nullptr) {
    const float s = Sigmoid(__half2float(shared.gate_logit[t * shared.gate_stride]));
    routed = __float2half(__half2float(routed) + s * __half2float(shared.out[i]));
  }
  out[i] = routed;
}

// Prefill: the pairs grouped by expert, so each expert's weights are read once per 64 of its
// pairs instead of once per pair. groups = start[E+1] (first sorted slot of each expert),
// tile_start[E+1] (first 64-slot tile of each expert), then order[pairs] (pair of each slot).
// Within an expert the slots come in atomic order; a row's arithmetic does not depend on its
// place in the tile, so the results do not either.
__global__ void GroupPairsKernel(const int32_t* __restrict__ idx, int64_t pairs, int64_t E, int32_t* groups) {
  extern __shared__ int32_t counts[];  // [E] counts, then [E] cursors
  int32_t* cursor = counts + E;
  int32_t *start = groups, *tile_start = groups + E + 1, *order = groups + 2 * (E + 1);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&counts[idx[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t slot = 0, tile = 0;
    for (int64_t e = 0; e < E; ++e) {
      start[e] = cursor[e] = slot;
      tile_start[e] = tile;
      slot += counts[e];
      tile += (counts[e] + kExpertTileRows - 1) / kExpertTileRows;
    }
    start[E] = slot;
    tile_start[E] = tile;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) order[atomicAdd(&cursor[idx[p]], 1)] = static_cast<int32_t>(p);
}

// The grouped GEMM's block tiles (GroupedTile), pipelined (kernels/cuda/wmma_pipeline.cuh): 64
// slots (pairs of one expert) × 128 columns by 8 warps of 32×32, in steps of 64 or 32 columns.
using ExpertTile64x128k64w8 = TileShape<kExpertTileRows, 128, 2, 4, 64>;
using ExpertTile64x128w8 = TileShape<kExpertTileRows, 128, 2, 4>;

// The slots' rows of x: x[pair / a_div], zeros for a slot past the expert's pairs.
struct PairRows {
  using Run = HalfRun;
  const __half* x;
  const int32_t* pair_of;  // shared memory
  int64_t a_div, K;
  __device__ __forceinline__ Run Fetch(int row, int64_t k) const {
    const int32_t p = pair_of[row];
    return FetchHalfRun(p >= 0 ? x + (p / a_div) * K : nullptr, k, K);
  }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) { StashHalfRun(r, dst); }
};

// Expert e's weight rows behind the tile's columns, dequantized into the tile as they are
// stashed. kSwiGlu: each 32 columns are 16 gate rows i and their 16 up rows I + i, so that one
// epilogue slice holds both halves of its outputs.
template <typename Rows, bool kSwiGlu>
struct ExpertColumns {
  struct Run {
    typename Rows::TileRun v;
    bool valid;
  };
  Rows rows;
  int64_t e, n0;  // n0: the tile's first intermediate index (kSwiGlu) or output row
  __device__ __forceinline__ int64_t WeightRow(int c) const {
    if constexpr (kSwiGlu) {
      const int64_t I = rows.N / 2, i = n0 + (c / 32) * 16 + c % 16;
      return i < I ? (c % 32 < 16 ? i : I + i) : -1;
    } else {
      return n0 + c < rows.N ? n0 + c : -1;
    }
  }
  __device__ __forceinline__ Run Fetch(int c, int64_t k) const {
    const int64_t n = WeightRow(c);
    Run r{};
    r.valid = n >= 0 && k < rows.K;  // K is a multiple of 16: a run is inside K or past it
    if (r.valid) r.v = rows.FetchTile8(e, n, k);
    return r;
  }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) {
    if (r.valid) {
      Rows::StashTile8(r.v, dst);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
};

// One tile of 64 slots of one expert (blockIdx.y: the tile in GroupPairsKernel's numbering;
// blocks past the last tile return) × Shape::kBN columns of its projection. A's rows are x[pair / a_div]:
// the token's hidden state for gate_up (a_div = k), the pair's activation for down (a_div = 1).
// kSwiGlu: the columns are kBN / 2 intermediate indices' gate and up rows, and the tile writes
// act[pair, i] = silu(gate)·up; otherwise it writes pair_out[pair, n] in FP32.
template <typename Shape, typename Rows, bool kSwiGlu>
__global__ void __launch_bounds__(Shape::kThreads, 2)
    GroupedExpertKernel(const __half* __restrict__ x, int64_t a_div, const int32_t* __restrict__ groups, int64_t E,
                        Rows rows, __half* __restrict__ act, float* __restrict__ pair_out) {
  static_assert(Shape::kBM == kExpertTileRows && Shape::kThreads >= kExpertTileRows, "a thread a slot");
  PipelineShared<Shape> s{DynamicShared()};
  __shared__ int32_t pair_of[kExpertTileRows];
  const int32_t *start = groups, *tile_start = groups + E + 1, *order = groups + 2 * (E + 1);
  const int32_t tile = blockIdx.y;
  if (tile >= tile_start[E]) return;
  int64_t lo = 0, hi = E - 1;  // the expert whose tiles hold `tile`: last e with tile_start[e] <= tile
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int64_t e = lo, s0 = start[e] + int64_t{tile - tile_start[e]} * kExpertTileRows;
  const int valid = static_cast<int>(start[e + 1] - s0 < kExpertTileRows ? start[e + 1] - s0 : kExpertTileRows);
  if (threadIdx.x < kExpertTileRows) pair_of[threadIdx.x] = threadIdx.x < valid ? order[s0 + threadIdx.x] : -1;
  __syncthreads();
  const int64_t K = rows.K, I = rows.N / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kSwiGlu ? Shape::kBN / 2 : Shape::kBN);
  const PairRows a{x, pair_of, a_div, K};
  const ExpertColumns<Rows, kSwiGlu> b{rows, e, n0};
  // A 16 × 32 slice: lane l takes row l / 2 and half of the slice's outputs.
  PipelinedTile<Shape>(s, K, a, b, [&](const float* slice, int m, int n, int lane) {
    const int r = lane / 2;
    if (m + r >= valid) return;
    const int64_t p = pair_of[m + r];
    const float* src = slice + r * Shape::kOutLd;
    if constexpr (kSwiGlu) {
      const int64_t i0 = n0 + n / 2;
#pragma unroll
      for (int c = (lane % 2) * 8; c < (lane % 2) * 8 + 8; ++c) {
        const int64_t i = i0 + c;
        if (i >= I) break;
        const float gate = src[c] * rows.Global(e, i), up = src[16 + c] * rows.Global(e, I + i);
        act[p * I + i] = __float2half(Silu(gate) * up);
      }
    } else {
#pragma unroll
      for (int c = (lane % 2) * 16; c < (lane % 2) * 16 + 16; ++c) {
        const int64_t nn = n0 + n + c;
        if (nn >= rows.N) break;
        pair_out[p * rows.N + nn] = src[c] * rows.Global(e, nn);
      }
    }
  });
}

// The lane-group decode kernels' rows a lane group and runs loaded ahead, as moe_bench's sweep
// chose them (down only where the chunked kernel does not take the shape).
struct DecodeShape {
  int rows, ahead;
};
constexpr DecodeShape kDecodeGateUp{1, 0}, kDecodeDown{2, 3};

// The chunked down kernel (moe_decode.cuh) where it takes the shape: NVFP4 weights whose K fit
// it. False where the lane-group kernel must run instead.
template <typename Rows>
bool DownChunked(const Rows& down, const int32_t* idx, ExpertScratch s, int64_t pairs, cudaStream_t stream) {
  if constexpr (!std::is_same_v<Rows, moe_decode::Nvfp4Rows>) {
    return false;
  } else {
    if (!moe_decode::ChunksFit(down)) return false;
    moe_decode::LaunchDownChunks(s.act, idx, down, s.pair_out, pairs, stream);
    Q38_CUDA_LAUNCHED();
    return true;
  }
}

// Both grouped GEMMs on one tile shape: gate/up with SiLU·up into act, down into pair_out.
template <typename Shape, typename Rows>
void LaunchGrouped(const __half* h, const Rows& gate_up, const Rows& down, ExpertScratch s, int64_t k, int64_t E,
                   int64_t tiles, cudaStream_t stream) {
  const int64_t I = down.K, H = down.N;
  AllowShared<Shape>(GroupedExpertKernel<Shape, Rows, true>);
  AllowShared<Shape>(GroupedExpertKernel<Shape, Rows, false>);
  GroupedExpertKernel<Shape, Rows, true>
      <<<dim3(CeilDiv(I, Shape::kBN / 2), tiles), Shape::kThreads, Shape::kSharedBytes, stream>>>(h, k, s.groups, E,
                                                                                                  gate_up, s.act, nullptr);
  Q38_CUDA_LAUNCHED();
  GroupedExpertKernel<Shape, Rows, false><<<dim3(CeilDiv(H, Shape::kBN), tiles), Shape::kThreads, Shape::kSharedBytes,
                                            stream>>>(s.act, 1, s.groups, E, down, nullptr, s.pair_out);
  Q38_CUDA_LAUNCHED();
}

template <typename Rows>
void RunExperts(const __half* h, const int32_t* idx, const __half* w, const Rows& gate_up, const Rows& down,
                __half* out, ExpertScratch s, int64_t T, int64_t k, int64_t E, cudaStream_t stream,
                GatedShared shared, GroupedTile tile) {
  const int64_t I = down.K, H = down.N, pairs = T * k;
  if (T > kPairwiseMaxTokens) {
    const int64_t tiles = CeilDiv(pairs, kExpertTileRows) + E;  // bounds Σ_e ⌈count_e / 64⌉
    CHECK_LE(tiles, 65535) << "too many expert tiles for one grid";
    GroupPairsKernel<<<1, 1024, 2 * E * sizeof(int32_t), stream>>>(idx, pairs, E, s.groups);
    Q38_CUDA_LAUNCHED();
    switch (tile) {
      case GroupedTile::k64x128k64w8:
        LaunchGrouped<ExpertTile64x128k64w8>(h, gate_up, down, s, k, E, tiles, stream);
        break;
      case GroupedTile::k64x128w8: LaunchGrouped<ExpertTile64x128w8>(h, gate_up, down, s, k, E, tiles, stream); break;
    }
  } else {
    moe_decode::LaunchGateUp<Rows, kDecodeGateUp.rows, kDecodeGateUp.ahead>(h, idx, gate_up, s.act, pairs, k, stream);
    Q38_CUDA_LAUNCHED();
    if (!DownChunked(down, idx, s, pairs, stream)) {
      moe_decode::LaunchDown<Rows, kDecodeDown.rows, kDecodeDown.ahead>(s.act, idx, down, s.pair_out, pairs, stream);
      Q38_CUDA_LAUNCHED();
    }
  }
  CombineKernel<<<CeilDiv(T * H, 256), 256, 0, stream>>>(s.pair_out, w, out, T, k, H, shared);
  Q38_CUDA_LAUNCHED();
}

__global__ void SiluMulKernel(const __half* __restrict__ gu, __half* __restrict__ y, int64_t T, int64_t I) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * I) return;
  const int64_t t = i / I, c = i % I;
  y[i] = __float2half(Silu(__half2float(gu[t * 2 * I + c])) * __half2float(gu[t * 2 * I + I + c]));
}

__global__ void AddSigmoidGatedKernel(__half* out, const __half* __restrict__ shared, const __half* __restrict__ gate,
                                      int64_t stride, int64_t T, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const float s = Sigmoid(__half2float(gate[(i / H) * stride]));
  out[i] = __float2half(__half2float(out[i]) + s * __half2float(shared[i]));
}

}  // namespace

void RouterTopK(const __half* logits, int32_t* idx, __half* w, int64_t T, int64_t E, int64_t k, cudaStream_t stream) {
  CHECK_LE(E, kRouterMaxExperts) << "experts for the router kernel";
  CHECK_LE(k, E) << "experts per token";
  const size_t shared = kRouterTokensPerBlock * k * sizeof(float);
  RouterKernel<<<CeilDiv(T, kRouterTokensPerBlock), kRouterTokensPerBlock * kWarp, shared, stream>>>(logits, idx, w,
                                                                                                     T, E, k);
  Q38_CUDA_LAUNCHED();
}

const char* GroupedTileName(GroupedTile tile) {
  switch (tile) {
    case GroupedTile::k64x128k64w8: return "64x128k64w8";
    case GroupedTile::k64x128w8: return "64x128w8";
  }
  return "?";
}

void RoutedExperts(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                   const ExpertProjection& down, __half* out, ExpertScratch scratch, int64_t T, int64_t k, int64_t E,
                   cudaStream_t stream, GatedShared shared, GroupedTile tile) {
  CHECK(gate_up.K % 16 == 0 && down.K % 16 == 0) << "expert K must be a multiple of 16";
  CHECK(reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(scratch.act) % 16 == 0)
      << "expert inputs must be 16-byte aligned";
  CHECK(reinterpret_cast<uintptr_t>(gate_up.codes) % 8 == 0 && reinterpret_cast<uintptr_t>(down.codes) % 8 == 0)
      << "expert codes must be 8-byte aligned";
  if (gate_up.dense != nullptr) {
    RunExperts(h, idx, w, moe_decode::DenseRows::Of(gate_up), moe_decode::DenseRows::Of(down), out, scratch, T, k, E,
               stream, shared, tile);
  } else {
    RunExperts(h, idx, w, moe_decode::Nvfp4Rows::Of(gate_up), moe_decode::Nvfp4Rows::Of(down), out, scratch, T, k, E,
               stream, shared, tile);
  }
}

void SiluMul(const __half* gu, __half* y, int64_t T, int64_t I, cudaStream_t stream) {
  SiluMulKernel<<<CeilDiv(T * I, 256), 256, 0, stream>>>(gu, y, T, I);
  Q38_CUDA_LAUNCHED();
}

void AddSigmoidGated(__half* out, const __half* shared, const __half* gate_logit, int64_t gate_stride, int64_t T,
                     int64_t H, cudaStream_t stream) {
  AddSigmoidGatedKernel<<<CeilDiv(T * H, 256), 256, 0, stream>>>(out, shared, gate_logit, gate_stride, T, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
