#include "kernels/attention/attention_prefill_cuda.h"

#include <mma.h>

#include "kernels/attention/attended_tokens.cuh"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {
namespace {

constexpr int kRows = 16;   // query heads of one KV group, zero-padded: the WMMA M
constexpr int kTile = 32;   // attended tokens a step: two WMMA N of Q·Kᵀ, two K of P·V
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kPad = 8;     // halves; keeps fragment rows off one shared-memory bank
constexpr int kPartLd = kTile + 4;

template <int kDh>
struct GroupShared {
  // The step's key and value rows; before the loop the group's queries, after it the output
  // (FP32), both in k.
  __half k[kTile][kDh + kPad];
  __half v[kTile][kDh + kPad];
  float part[2][kRows][kPartLd];  // Q·Kᵀ over each half of head_dim
  __half p[kRows][kTile + kPad];  // this step's probabilities, unnormalized
  float m[kRows], l[kRows], corr[kRows];
  int64_t row[kTile];  // the step's attended tokens' offsets into the caches
};
static_assert(sizeof(GroupShared<256>) <= 48 * 1024, "static shared memory is at most 48 KB a block");

using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// Block (query t, KV head): flash-style online softmax over the query's attended tokens, 32 at
// a time. Warp w computes Q·Kᵀ for tokens 16·(w % 2).. over half w / 2 of head_dim, its query
// fragments held in registers for the whole loop; the halves meet in shared memory. For P·V
// each warp keeps its 16-column slices of the output in accumulator fragments and rescales them
// in registers as the maximum moves: the row of each fragment element is read once from a
// fragment loaded with row numbers (the element order is the same for every accumulator of one
// shape). Scores and softmax in FP32, probabilities rounded to FP16 for the tensor cores; the
// normalizer sums the rounded probabilities that P·V multiplies.
template <int kDh>
__global__ void __launch_bounds__(kThreads, 3)
    GroupedAttentionKernel(const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
                           const int32_t* __restrict__ sel, const int64_t* __restrict__ positions,
                           __half* __restrict__ o, SelectedAttentionDims d) {
  using namespace nvcuda;
  constexpr int kSlices = kDh / 16, kChunks = kDh / 8;  // 16-wide fragments; 8-half (16-byte) runs per row
  constexpr int kHalf = kSlices / 2;                    // Q·Kᵀ slices a warp
  constexpr int kOut = (kSlices + kWarps - 1) / kWarps;  // P·V output slices a warp
  __shared__ __align__(32) GroupShared<kDh> s;
  const int64_t t = blockIdx.x / d.kv_heads, kvh = blockIdx.x % d.kv_heads;
  const int64_t group = d.q_heads / d.kv_heads, h0 = kvh * group;
  const int tid = threadIdx.x, warp = tid / kWarp;
  const int64_t n_sel = AttendedTokens::BlockCountSelected(sel + t * d.max_blocks, d.max_blocks);
  const AttendedTokens att(sel + t * d.max_blocks, AttendedTokens::Counted{n_sel}, d.ratio, positions[t]);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const auto offsets = [&](int64_t base) {  // the step's rows' cache offsets, by the first kTile threads
    if (tid < kTile) s.row[tid] = base + tid < att.total ? (att[base + tid] * d.kv_heads + kvh) * kDh : -1;
  };

  // The queries through shared memory into registers, and the row of each accumulator element.
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    *reinterpret_cast<uint4*>(&s.k[r][c]) =
        r < group ? *reinterpret_cast<const uint4*>(q + ((t * d.q_heads + h0 + r) * kDh + c)) : zero;
  }
  for (int i = tid; i < kRows * 16; i += kThreads) s.part[0][i / 16][i % 16] = static_cast<float>(i / 16);
  if (tid < kRows) {
    s.m[tid] = -INFINITY;
    s.l[tid] = 0.0f;
  }
  offsets(0);
  __syncthreads();
  const int col = warp % 2, half = warp / 2;  // Q·Kᵀ: this warp's 16 tokens and half of head_dim
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa[kHalf];
#pragma unroll
  for (int f = 0; f < kHalf; ++f) wmma::load_matrix_sync(qa[f], &s.k[0][(half * kHalf + f) * 16], kDh + kPad);
  int row_of[Accumulator::num_elements];
  {
    Accumulator rows;
    wmma::load_matrix_sync(rows, &s.part[0][0][0], kPartLd, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < rows.num_elements; ++i) row_of[i] = static_cast<int>(rows.x[i]);
  }
  Accumulator out[kOut];
#pragma unroll
  for (int j = 0; j < kOut; ++j) wmma::fill_fragment(out[j], 0.0f);
  const float scale = rsqrtf(static_cast<float>(kDh));
  __syncthreads();  // the queries and row numbers are read before k and part are written

  for (int64_t base = 0; base < att.total; base += kTile) {
    for (int i = tid; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const int64_t off = s.row[r];
      *reinterpret_cast<uint4*>(&s.k[r][c]) = off >= 0 ? *reinterpret_cast<const uint4*>(kc + off + c) : zero;
      *reinterpret_cast<uint4*>(&s.v[r][c]) = off >= 0 ? *reinterpret_cast<const uint4*>(vc + off + c) : zero;
    }
    __syncthreads();
    offsets(base + kTile);  // row is read again only after the step's last barrier
    {
      Accumulator acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int f = 0; f < kHalf; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, &s.k[col * 16][(half * kHalf + f) * 16], kDh + kPad);
        wmma::mma_sync(acc, qa[f], kb, acc);
      }
      wmma::store_matrix_sync(&s.part[half][0][col * 16], acc, kPartLd, wmma::mem_row_major);
    }
    __syncthreads();
    {
      // Eight threads a query row, four tokens each.
      const int r = tid / 8, c = (tid % 8) * 4;
      float sc[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float v = s.part[0][r][c + j] + s.part[1][r][c + j];
        sc[j] = base + c + j < att.total ? v * scale : -INFINITY;
      }
      OnlineSoftmaxStep(sc, &s.p[r][c], s.m[r], s.l[r], s.corr[r], tid % 8 == 0);
    }
    __syncthreads();
    {
      float corr[Accumulator::num_elements];
#pragma unroll
      for (int i = 0; i < Accumulator::num_elements; ++i) corr[i] = s.corr[row_of[i]];
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa[2];
      wmma::load_matrix_sync(pa[0], &s.p[0][0], kTile + kPad);
      wmma::load_matrix_sync(pa[1], &s.p[0][16], kTile + kPad);
#pragma unroll
      for (int j = 0; j < kOut; ++j) {
        const int f = warp + j * kWarps;
        if (f >= kSlices) break;
#pragma unroll
        for (int i = 0; i < out[j].num_elements; ++i) out[j].x[i] *= corr[i];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
          wmma::load_matrix_sync(vb, &s.v[kk * 16][f * 16], kDh + kPad);
          wmma::mma_sync(out[j], pa[kk], vb, out[j]);
        }
      }
    }
    __syncthreads();  // k, v, part, p and corr are rewritten by the next step
  }
  static_assert(sizeof(float) * kRows * (kDh + 4) <= sizeof(s.k), "the output fits k");
  float* result = reinterpret_cast<float*>(&s.k[0][0]);  // [kRows][kDh + 4]
#pragma unroll
  for (int j = 0; j < kOut; ++j) {
    const int f = warp + j * kWarps;
    if (f < kSlices) wmma::store_matrix_sync(result + f * 16, out[j], kDh + 4, wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = tid; i < group * kDh; i += kThreads) {
    const int r = i / kDh, c = i % kDh;
    o[(t * d.q_heads + h0 + r) * kDh + c] = __float2half(result[r * (kDh + 4) + c] / s.l[r]);
  }
}

}  // namespace

bool GroupedAttentionFits(const __half* q, const __half* kcache, const __half* vcache, const SelectedAttentionDims& d) {
  const bool dh = d.head_dim == 32 || d.head_dim == 64 || d.head_dim == 128 || d.head_dim == 256;
  return dh && d.q_heads % d.kv_heads == 0 && d.q_heads / d.kv_heads <= kRows && Aligned16(q) && Aligned16(kcache) &&
         Aligned16(vcache);
}

void GroupedAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                      const int64_t* positions, __half* o, int64_t T, const SelectedAttentionDims& d,
                      cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(T * d.kv_heads);
  const unsigned block = kThreads;
  switch (d.head_dim) {
    case 32:
      GroupedAttentionKernel<32><<<grid, block, 0, stream>>>(q, kcache, vcache, sel, positions, o, d);
      break;
    case 64:
      GroupedAttentionKernel<64><<<grid, block, 0, stream>>>(q, kcache, vcache, sel, positions, o, d);
      break;
    case 128:
      GroupedAttentionKernel<128><<<grid, block, 0, stream>>>(q, kcache, vcache, sel, positions, o, d);
      break;
    case 256:
      GroupedAttentionKernel<256><<<grid, block, 0, stream>>>(q, kcache, vcache, sel, positions, o, d);
      break;
    default:
      LOG(FATAL) << "head_dim " << d.head_dim << " has no grouped attention kernel (32, 64, 128, 256)";
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
