// Pieces of the indexer's block scores and top-k selection shared by the per-query kernels
// (indexer_cuda.cu) and the one-query kernel with grid-wide barriers (indexer_grid_cuda.cu), so
// that both score and choose alike.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::indexer {

constexpr int kMaxDi = 256, kMaxIndexHeads = 8;

// Scores of block ids first, first + 1, … (kIds of them; those from `end` on are not read) for
// one query, by a whole warp: Σ over heads of relu(q_h · key) / √di, every head's dot product
// from one read of the pooled key (q in shared memory, [heads, di] FP32). All kIds keys' loads
// are issued before the first product. Each head sums its lanes' strided products, then across
// the warp, as the order of the scores is defined; every lane gets the scores.
template <int kIds>
__device__ __forceinline__ void BlockScores(const float* qs, const __half* pooled, int first, int end, int heads,
                                            int di, int lane, float (&score)[kIds]) {
  constexpr int kRuns = kMaxDi / kWarp;
  __half key[kIds][kRuns];
#pragma unroll
  for (int i = 0; i < kIds; ++i) {
#pragma unroll
    for (int m = 0; m < kRuns; ++m) {
      const int c = lane + kWarp * m;
      key[i][m] = first + i < end && c < di ? pooled[static_cast<int64_t>(first + i) * di + c] : __float2half(0.0f);
    }
  }
#pragma unroll
  for (int i = 0; i < kIds; ++i) {
    float dot[kMaxIndexHeads] = {};
#pragma unroll
    for (int m = 0; m < kRuns; ++m) {
      const int c = lane + kWarp * m;
      if (c >= di) break;
      const float k = __half2float(key[i][m]);
#pragma unroll
      for (int h = 0; h < kMaxIndexHeads; ++h) {
        if (h < heads) dot[h] += qs[h * di + c] * k;
      }
    }
    float s = 0;
#pragma unroll
    for (int h = 0; h < kMaxIndexHeads; ++h) {
      if (h < heads) s += fmaxf(WarpSum(dot[h]), 0.0f);
    }
    score[i] = s * rsqrtf(static_cast<float>(di));
  }
}

// Scores, order-preserving as unsigned keys, so the k-th largest is found by radix selection.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Warp 0, after a pass's histogram (256 bins in shared memory): the digit at which the count of
// keys from the top reaches `need`, found by a suffix sum over the lanes (8 digits a lane) instead
// of a walk over 256; writes the extended prefix and what is still needed within it.
__device__ __forceinline__ void FindDigit(const int* hist, int lane, int shift, uint32_t prefix, int need,
                                          uint32_t* prefix_out, int* need_out) {
  int count[8], mine = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) mine += (count[j] = hist[lane * 8 + j]);
  int from_top = mine;  // keys in this lane's digits and every higher lane's
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const int y = __shfl_down_sync(0xffffffffu, from_top, o);
    if (lane + o < kWarp) from_top += y;
  }
  int above = from_top - mine;
  if (above < need && need <= from_top) {
    for (int j = 7; j >= 0; --j) {
      if (above + count[j] >= need) {
        *prefix_out = prefix | (static_cast<uint32_t>(lane * 8 + j) << shift);
        *need_out = need - above;
        return;
      }
      above += count[j];
    }
  }
}

}  // namespace q38::cuda::indexer
