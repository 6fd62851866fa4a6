// The routed experts' prefill kernels (T > kPairwiseMaxTokens): the pairs grouped by expert,
// then each expert's pairs through its weights as a WMMA GEMM on the pipelined tile
// (kernels/cuda/wmma_pipeline.cuh), gate/up with SiLU·up fused into its epilogue and down into
// FP32 per pair. In a header so that kernels/moe/moe_bench.cu can time the grouping, the two
// GEMMs and their tiles apart; moe_cuda.cu launches them (RoutedExperts).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_pipeline.cuh"
#include "kernels/moe/moe_cuda.h"

namespace q38::cuda::moe_grouped {

// The pairs grouped by expert, so that each expert's weights are read once per tile of its pairs
// instead of once per pair. groups = start[E+1] (first sorted slot of each expert),
// tile_start[E+1] (first tile of `tile_rows` slots of each expert), then order[pairs] (pair of
// each slot). Within an expert the slots come in atomic order; a row's arithmetic does not
// depend on its place in the tile, so the results do not either.
static __global__ void GroupPairsKernel(const int32_t* __restrict__ idx, int64_t pairs, int64_t E, int tile_rows,
                                        int32_t* groups) {
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
      tile += (counts[e] + tile_rows - 1) / tile_rows;
    }
    start[E] = slot;
    tile_start[E] = tile;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) order[atomicAdd(&cursor[idx[p]], 1)] = static_cast<int32_t>(p);
}

// Tiles a grid must cover: Σ_e ⌈count_e / rows⌉ ≤ ⌈pairs / rows⌉ + E.
inline int64_t TileBound(int64_t pairs, int64_t E, int rows) { return CeilDiv(pairs, rows) + E; }

inline void LaunchGroupPairs(const int32_t* idx, int64_t pairs, int64_t E, int tile_rows, int32_t* groups,
                             cudaStream_t stream) {
  GroupPairsKernel<<<1, 1024, 2 * E * sizeof(int32_t), stream>>>(idx, pairs, E, tile_rows, groups);
  Q38_CUDA_LAUNCHED();
}

// The block tiles (GroupedTile): 64 or 128 slots × 128 columns by 8 warps of 32 × 32 or 64 × 32,
// K in steps of 64.
using Tile64x128k64w8 = TileShape<64, 128, 2, 4, 64>;
using Tile128x128k64w8 = TileShape<128, 128, 2, 4, 64>;

// f(Shape{}) on the shape of `tile`.
template <typename F>
void WithTile(GroupedTile tile, F f) {
  switch (tile) {
    case GroupedTile::k64x128k64w8: return f(Tile64x128k64w8{});
    case GroupedTile::k128x128k64w8: return f(Tile128x128k64w8{});
  }
}

// The tile's rows of x, one offset a slot in shared memory, resolved once a tile ((pair / a_div) ·
// K; a slot past the expert's pairs reads the first slot's row).
struct PairRows {
  using Run = HalfRun;
  const __half* x;
  const int* row_at;
  __device__ __forceinline__ int At(int row) const { return row_at[row]; }
  __device__ __forceinline__ Run Fetch(int row, int k, bool in_k) const { return FetchHalfRun(x, row, k, in_k); }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) { StashHalfRun(r, dst); }
};

// Expert e's weight rows behind the tile's columns (Rows::Tiles: its rows at 32-bit offsets),
// dequantized into the tile as they are stashed. kSwiGlu: each 32 columns are 16 gate rows i and
// their 16 up rows I + i, so that one epilogue slice holds both halves of its outputs.
template <typename Rows, bool kSwiGlu>
struct ExpertColumns {
  using Tiles = typename Rows::Tiles;
  using Run = typename Tiles::Run;
  Tiles tiles;
  int64_t N, n0;  // n0: the tile's first intermediate index (kSwiGlu) or output row
  __device__ __forceinline__ int At(int c) const {
    // Columns past the projection's rows read its last (gate or up) row.
    int64_t n;
    if constexpr (kSwiGlu) {
      const int64_t I = N / 2, i = min(n0 + (c / 32) * 16 + c % 16, I - 1);
      n = c % 32 < 16 ? i : I + i;
    } else {
      n = min(n0 + c, N - 1);
    }
    return tiles.Offset(n);
  }
  // Past K a run is all zero codes and a zero scale, which dequantize to zeros.
  __device__ __forceinline__ Run Fetch(int row, int k, bool in_k) const { return in_k ? tiles.Fetch(row, k) : Run{}; }
  __device__ __forceinline__ static void Stash(const Run& r, __half* dst) { Tiles::Stash(r, dst); }
};

// One tile of Shape::kBM slots of one expert (blockIdx.y: the tile in GroupPairsKernel's
// numbering, which must have counted tiles of kBM; blocks past the last tile return) ×
// Shape::kBN columns of its projection. A's rows are x[pair / a_div]: the token's hidden state
// for gate/up (a_div = k), the pair's activation for down (a_div = 1). kSwiGlu: the columns are
// kBN / 2 intermediate indices' gate and up rows, and the tile writes act[pair, i] =
// silu(gate)·up; otherwise it writes pair_out[pair, n] in FP32. Warps whose rows are all past
// the expert's pairs skip their products (the pipeline's valid rows).
template <typename Shape, typename Rows, bool kSwiGlu>
__global__ void __launch_bounds__(Shape::kThreads, 2)
    GroupedExpertKernel(const __half* __restrict__ x, int64_t a_div, const int32_t* __restrict__ groups, int64_t E,
                        Rows rows, __half* __restrict__ act, float* __restrict__ pair_out) {
  constexpr int kRows = Shape::kBM;
  constexpr float kUnscale = Rows::Tiles::kUnscale;  // the tiles' power of two, undone per product
  static_assert(Shape::kThreads >= kRows, "a thread a slot");
  PipelineShared<Shape> s{DynamicShared()};
  __shared__ int32_t pair_of[kRows];
  __shared__ int row_at[kRows];
  const int32_t *start = groups, *tile_start = groups + E + 1, *order = groups + 2 * (E + 1);
  const int32_t tile = blockIdx.y;
  if (tile >= tile_start[E]) return;
  int64_t lo = 0, hi = E - 1;  // the expert whose tiles hold `tile`: last e with tile_start[e] <= tile
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int64_t K = rows.K, I = rows.N / 2;
  const int64_t e = lo, s0 = start[e] + int64_t{tile - tile_start[e]} * kRows;
  const int valid = static_cast<int>(start[e + 1] - s0 < kRows ? start[e + 1] - s0 : kRows);
  if (threadIdx.x < kRows) {
    const int32_t p = threadIdx.x < valid ? order[s0 + threadIdx.x] : -1;
    pair_of[threadIdx.x] = p;
    row_at[threadIdx.x] = static_cast<int>(((p >= 0 ? p : order[s0]) / a_div) * K);
  }
  __syncthreads();
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kSwiGlu ? Shape::kBN / 2 : Shape::kBN);
  const PairRows a{x, row_at};
  const ExpertColumns<Rows, kSwiGlu> b{rows.TilesOf(e), rows.N, n0};
  PipelinedTile<Shape>(s, K, FirstRows{valid}, a, b, [&](const float* slice, int m, int n, int lane) {
    if constexpr (kSwiGlu) {
      // Lane l: row l / 2, 8 intermediate indices from (l % 2) · 8, one 16-byte store (I is a
      // multiple of 16, so the 8 lie inside I or past it together).
      const int r = lane / 2, c = (lane % 2) * 8;
      const int64_t i = n0 + n / 2 + c;
      if (m + r >= valid || i >= I) return;
      const float* src = slice + r * Shape::kOutLd + c;
      float y[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float gate = src[j] * kUnscale * rows.Global(e, i + j),
                    up = src[16 + j] * kUnscale * rows.Global(e, I + i + j);
        y[j] = Silu(gate) * up;
      }
      StoreHalves<8>(act + pair_of[m + r] * I + i, y);
    } else {
      // Lane l: rows l / 8 + 4q, 4 columns from (l % 8) · 4, one 16-byte store each (N is a
      // multiple of 16): a row's 32 columns in one 128-byte segment.
      const int c = (lane % 8) * 4;
      const int64_t nn = n0 + n + c;
      if (nn >= rows.N) return;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = q * 4 + lane / 8;
        if (m + r >= valid) break;
        const float4 v = *reinterpret_cast<const float4*>(slice + r * Shape::kOutLd + c);
        const float4 o{v.x * kUnscale * rows.Global(e, nn), v.y * kUnscale * rows.Global(e, nn + 1),
                       v.z * kUnscale * rows.Global(e, nn + 2), v.w * kUnscale * rows.Global(e, nn + 3)};
        *reinterpret_cast<float4*>(pair_out + pair_of[m + r] * rows.N + nn) = o;
      }
    }
  });
}

// The tiles address rows of x and act, and an expert's weight rows, by 32-bit offsets.
inline constexpr int64_t kMaxOffsets = int64_t{1} << 31;

// gate/up with SiLU·up into act [pairs, I], and down into pair_out [pairs, H] in FP32, on one
// tile shape; `groups` from LaunchGroupPairs with tile_rows = Shape::kBM, `tiles` its TileBound.
template <typename Shape, typename Rows>
void LaunchGateUp(const __half* h, const Rows& gate_up, const int32_t* groups, __half* act, int64_t pairs, int64_t k,
                  int64_t E, int64_t tiles, cudaStream_t stream) {
  CHECK(CeilDiv(pairs, k) * gate_up.K < kMaxOffsets && gate_up.N * gate_up.K < kMaxOffsets)
      << "gate/up operands too large for the grouped route";
  const auto kernel = GroupedExpertKernel<Shape, Rows, true>;
  AllowShared<Shape>(kernel);
  kernel<<<dim3(CeilDiv(gate_up.N / 2, Shape::kBN / 2), tiles), Shape::kThreads, Shape::kSharedBytes, stream>>>(
      h, k, groups, E, gate_up, act, nullptr);
  Q38_CUDA_LAUNCHED();
}
template <typename Shape, typename Rows>
void LaunchDown(const __half* act, const Rows& down, const int32_t* groups, float* pair_out, int64_t pairs, int64_t E,
                int64_t tiles, cudaStream_t stream) {
  CHECK(pairs * down.K < kMaxOffsets && down.N * down.K < kMaxOffsets) << "down operands too large for the grouped route";
  const auto kernel = GroupedExpertKernel<Shape, Rows, false>;
  AllowShared<Shape>(kernel);
  kernel<<<dim3(CeilDiv(down.N, Shape::kBN), tiles), Shape::kThreads, Shape::kSharedBytes, stream>>>(
      act, 1, groups, E, down, nullptr, pair_out);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda::moe_grouped
