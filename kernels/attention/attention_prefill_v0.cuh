// Prefill attention as it stood before (commit 73fba30: 16 attended tokens a step, the output
// rescaled and accumulated in shared memory every step, every thread counting the selection),
// kept for attention_bench alone, which times it beside the launched kernel and compares their
// outputs. Not used by the model. Same contract as cuda::GroupedAttention.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "kernels/attention/attended_tokens.cuh"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::prefill_v0 {

constexpr int kRows = 16;   // query heads of one KV group, zero-padded: the WMMA M
constexpr int kTile = 16;   // attended tokens per step: the WMMA N of Q·Kᵀ and K of P·V
constexpr int kWarps = 4;
constexpr int kPad = 8;     // halves; keeps fragment rows off one shared-memory bank

template <int kDh>
struct GroupShared {
  __half q[kRows][kDh + kPad];
  __half k[kTile][kDh + kPad];
  __half v[kTile][kDh + kPad];
  float partial[kWarps][kRows][kTile];  // each warp's share of Q·Kᵀ over its head_dim slices
  __half p[kRows][kTile + kPad];        // this step's probabilities, unnormalized
  float o[kRows][kDh + 4];              // the running output, rescaled as the maximum moves
  float m[kRows], l[kRows], corr[kRows];
};
static_assert(sizeof(GroupShared<256>) <= 48 * 1024, "static shared memory is at most 48 KB a block");

// Block (query t, KV head): flash-style online softmax over the query's attended tokens, 16 at
// a time. Q·Kᵀ splits head_dim over the warps (partial sums added through shared memory); P·V
// gives each warp its own 16-column slices of the output, which it rescales and accumulates in
// place. Scores and softmax in FP32, probabilities rounded to FP16 for the tensor cores.
template <int kDh>
__global__ void __launch_bounds__(kWarps * kWarp)
    PrefillAttentionV0Kernel(const __half* __restrict__ q, const __half* __restrict__ kc,
                             const __half* __restrict__ vc, const int32_t* __restrict__ sel,
                             const int64_t* __restrict__ positions, __half* __restrict__ o, SelectedAttentionDims d) {
  using namespace nvcuda;
  constexpr int kSlices = kDh / 16, kChunks = kDh / 8;  // 16-wide fragments; 8-half (16-byte) runs per row
  __shared__ __align__(32) GroupShared<kDh> s;
  const int64_t t = blockIdx.x / d.kv_heads, kvh = blockIdx.x % d.kv_heads;
  const int64_t group = d.q_heads / d.kv_heads, h0 = kvh * group;
  const int warp = threadIdx.x / kWarp;
  const AttendedTokens att(sel + t * d.max_blocks, d.max_blocks, d.ratio, positions[t]);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  for (int i = threadIdx.x; i < kRows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    *reinterpret_cast<uint4*>(&s.q[r][c]) =
        r < group ? *reinterpret_cast<const uint4*>(q + ((t * d.q_heads + h0 + r) * kDh + c)) : zero;
  }
  for (int i = threadIdx.x; i < kRows * kDh; i += blockDim.x) s.o[i / kDh][i % kDh] = 0.0f;
  if (threadIdx.x < kRows) {
    s.m[threadIdx.x] = -INFINITY;
    s.l[threadIdx.x] = 0.0f;
  }
  const float scale = rsqrtf(static_cast<float>(kDh));

  for (int64_t base = 0; base < att.total; base += kTile) {
    for (int i = threadIdx.x; i < kTile * kChunks; i += blockDim.x) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const bool in = base + r < att.total;
      const int64_t off = in ? (att[base + r] * d.kv_heads + kvh) * kDh + c : 0;
      *reinterpret_cast<uint4*>(&s.k[r][c]) = in ? *reinterpret_cast<const uint4*>(kc + off) : zero;
      *reinterpret_cast<uint4*>(&s.v[r][c]) = in ? *reinterpret_cast<const uint4*>(vc + off) : zero;
    }
    __syncthreads();
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int f = warp; f < kSlices; f += kWarps) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
        wmma::load_matrix_sync(qa, &s.q[0][f * 16], kDh + kPad);
        wmma::load_matrix_sync(kb, &s.k[0][f * 16], kDh + kPad);
        wmma::mma_sync(acc, qa, kb, acc);
      }
      wmma::store_matrix_sync(&s.partial[warp][0][0], acc, kTile, wmma::mem_row_major);
    }
    __syncthreads();
    {
      // Eight threads per query row, two tokens each.
      const int r = threadIdx.x / 8, c = (threadIdx.x % 8) * 2;
      float sc[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float v = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += s.partial[w][r][c + j];
        sc[j] = base + c + j < att.total ? v * scale : -INFINITY;
      }
      OnlineSoftmaxStep(sc, &s.p[r][c], s.m[r], s.l[r], s.corr[r], threadIdx.x % 8 == 0);
    }
    __syncthreads();
    {
      const int lane = threadIdx.x % kWarp;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
      wmma::load_matrix_sync(pa, &s.p[0][0], kTile + kPad);
      for (int f = warp; f < kSlices; f += kWarps) {
        for (int i = lane; i < kRows * 16; i += kWarp) s.o[i / 16][f * 16 + i % 16] *= s.corr[i / 16];
        __syncwarp();
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(vb, &s.v[0][f * 16], kDh + kPad);
        wmma::load_matrix_sync(acc, &s.o[0][f * 16], kDh + 4, wmma::mem_row_major);
        wmma::mma_sync(acc, pa, vb, acc);
        wmma::store_matrix_sync(&s.o[0][f * 16], acc, kDh + 4, wmma::mem_row_major);
      }
    }
    __syncthreads();  // k, v, partial and p are rewritten by the next step
  }
  for (int i = threadIdx.x; i < group * kDh; i += blockDim.x) {
    const int r = i / kDh, c = i % kDh;
    o[(t * d.q_heads + h0 + r) * kDh + c] = __float2half(s.o[r][c] / s.l[r]);
  }
}

// The kernel at head_dim 256, T queries (the bench's shapes).
inline void PrefillAttentionV0(const __half* q, const __half* kc, const __half* vc, const int32_t* sel,
                               const int64_t* positions, __half* o, int64_t T, const SelectedAttentionDims& d,
                               cudaStream_t stream) {
  PrefillAttentionV0Kernel<256><<<static_cast<unsigned>(T * d.kv_heads), kWarps * kWarp, 0, stream>>>(
      q, kc, vc, sel, positions, o, d);
}

}  // namespace q38::cuda::prefill_v0
