// The QSA indexer on the GPU (docs/model.md §8.2; declared in attention_cuda.h): the pooled key
// of each block a token completes, the block scores of each query, and the top max_blocks of them.
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/indexer_select.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/rope/rope_device.cuh"

namespace q38::cuda {
namespace {

using indexer::kMaxDi;
using indexer::kMaxIndexHeads;

// One block per token; a token at position p completes block (p+1)/ratio − 1 when (p+1) is a
// multiple of ratio: its mean key, zero-centred RMSNorm, RoPE at the block's first position.
__global__ void PoolKernel(const __half* __restrict__ raw, const __half* __restrict__ w, __half* pooled,
                           const int64_t* __restrict__ positions, int64_t di, int64_t ratio, float eps,
                           int64_t rotary_dim, float theta) {
  __shared__ float v[kMaxDi];
  const int64_t end = positions[blockIdx.x] + 1;
  if (end % ratio != 0) return;
  const int64_t b = end / ratio - 1;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < di; c += blockDim.x) {
    float s = 0;
    for (int64_t r = 0; r < ratio; ++r) s += __half2float(raw[(b * ratio + r) * di + c]);
    v[c] = s / ratio;
    ss += v[c] * v[c];
  }
  const float inv = rsqrtf(BlockSum(ss) / di + eps);
  for (int64_t c = threadIdx.x; c < di; c += blockDim.x) v[c] = v[c] * inv * (1.0f + __half2float(w[c]));
  __syncthreads();
  const int64_t half = rotary_dim / 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) RotatePair(v[i], v[i + half], b * ratio, i, rotary_dim, theta);
  __syncthreads();
  for (int64_t c = threadIdx.x; c < di; c += blockDim.x) pooled[b * di + c] = __float2half(v[c]);
}

constexpr int kScoreThreads = 256, kScoreBlocksPerCta = 32;

// Block scores of every query that selects sparsely, spread over (query, run of 32 block ids) so
// that a single decode query still fills the GPU: one warp per block id at a time
// (indexer::BlockScores), the query's heads in shared memory.
__global__ void __launch_bounds__(kScoreThreads)
    ScoreKernel(const __half* __restrict__ iq, const __half* __restrict__ pooled, const int64_t* __restrict__ positions,
                float* scratch, int heads, int di, int ratio, int max_blocks, int64_t scratch_stride) {
  __shared__ float qs[kMaxIndexHeads * kMaxDi];
  const int t = blockIdx.x;
  const int nb = static_cast<int>((positions[t] + 1) / ratio);
  if (nb <= max_blocks) return;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (int i = threadIdx.x; i < heads * di; i += blockDim.x) qs[i] = __half2float(iq[static_cast<int64_t>(t) * heads * di + i]);
  __syncthreads();
  const int first = blockIdx.y * kScoreBlocksPerCta;
  for (int b = first + warp; b < min(nb, first + kScoreBlocksPerCta); b += warps) {
    float s[1];
    indexer::BlockScores<1>(qs, pooled, b, nb, heads, di, lane, s);
    if (lane == 0) scratch[t * scratch_stride + b] = s[0];
  }
}

constexpr int kSelectThreads = 512, kSelectWarps = kSelectThreads / kWarp;
constexpr int kKeyBatch = 8;  // 32-id steps whose scores a warp loads before it uses any

// The keys of ids b0 + u·32 + lane (u < kKeyBatch) below hi, all loads issued before the first
// is used; 0 past hi.
__device__ __forceinline__ void LoadKeys(const float* score, int b0, int hi, int lane, uint32_t* key) {
#pragma unroll
  for (int u = 0; u < kKeyBatch; ++u) {
    const int b = b0 + u * kWarp + lane;
    key[u] = b < hi ? indexer::OrderKey(score[b]) : 0;
  }
}

// One block per query: when the visible complete blocks do not all fit, the top max_blocks by
// score (ScoreKernel's), ties to the lower block id, written in ascending id order. Warp w owns
// the ids [w·span, (w+1)·span) and reads them 256 at a time (LoadKeys). Four radix passes of 8 bits find the
// max_blocks-th largest key; then each warp counts what it takes, the warps' offsets follow from
// those counts, and a second walk writes the ids in order (ballots rank them within a step).
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(const int64_t* __restrict__ positions, int32_t* __restrict__ sel, const float* __restrict__ scratch,
                 int ratio, int max_blocks, int64_t scratch_stride) {
  __shared__ int hist[256];
  __shared__ uint32_t prefix_sh;
  __shared__ int need_sh;
  __shared__ int warp_above[kSelectWarps], warp_equal[kSelectWarps];
  const int t = blockIdx.x;
  const int nb = static_cast<int>((positions[t] + 1) / ratio);
  int32_t* out = sel + static_cast<int64_t>(t) * max_blocks;
  if (nb <= max_blocks) {
    for (int i = threadIdx.x; i < max_blocks; i += blockDim.x) out[i] = i < nb ? i : -1;
    return;
  }
  const float* score = scratch + t * scratch_stride;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const int span = (nb + warps * kWarp - 1) / (warps * kWarp) * kWarp;
  const int lo = warp * span, hi = min(nb, lo + span);
  uint32_t prefix = 0, mask = 0;
  int need = max_blocks;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int b0 = lo; b0 < hi; b0 += kKeyBatch * kWarp) {
      uint32_t key[kKeyBatch];
      LoadKeys(score, b0, hi, lane, key);
#pragma unroll
      for (int u = 0; u < kKeyBatch; ++u) {
        if (b0 + u * kWarp + lane < hi && (key[u] & mask) == prefix) atomicAdd(&hist[(key[u] >> shift) & 255u], 1);
      }
    }
    __syncthreads();
    if (warp == 0) indexer::FindDigit(hist, lane, shift, prefix, need, &prefix_sh, &need_sh);
    __syncthreads();
    prefix = prefix_sh;
    need = need_sh;
    mask |= 255u << shift;
  }
  // prefix is the max_blocks-th largest key: take every key above it and the `need` lowest ids
  // equal to it.
  int above = 0, equal = 0;
  for (int b0 = lo; b0 < hi; b0 += kKeyBatch * kWarp) {
    uint32_t key[kKeyBatch];
    LoadKeys(score, b0, hi, lane, key);
#pragma unroll
    for (int u = 0; u < kKeyBatch; ++u) {
      const bool in = b0 + u * kWarp + lane < hi;
      above += __popc(__ballot_sync(0xffffffffu, in && key[u] > prefix));
      equal += __popc(__ballot_sync(0xffffffffu, in && key[u] == prefix));
    }
  }
  if (lane == 0) {
    warp_above[warp] = above;
    warp_equal[warp] = equal;
  }
  __syncthreads();
  int equal_before = 0, slot = 0;
  for (int w = 0; w < warp; ++w) {
    slot += warp_above[w] + min(max(need - equal_before, 0), warp_equal[w]);
    equal_before += warp_equal[w];
  }
  const uint32_t below = (1u << lane) - 1;
  for (int b0 = lo; b0 < hi; b0 += kKeyBatch * kWarp) {
    uint32_t key[kKeyBatch];
    LoadKeys(score, b0, hi, lane, key);
#pragma unroll
    for (int u = 0; u < kKeyBatch; ++u) {
      const int b = b0 + u * kWarp + lane;
      const uint32_t equals = __ballot_sync(0xffffffffu, b < hi && key[u] == prefix);
      const bool take = b < hi && (key[u] > prefix || (key[u] == prefix && equal_before + __popc(equals & below) < need));
      const uint32_t taken = __ballot_sync(0xffffffffu, take);
      if (take) out[slot + __popc(taken & below)] = b;
      slot += __popc(taken);
      equal_before += __popc(equals);
    }
  }
}

}  // namespace

void IndexerPoolBlocks(const __half* raw, const __half* knorm_w, __half* pooled, const int64_t* positions,
                       int64_t T, int64_t di, int64_t ratio, float eps, int64_t rotary_dim, double theta,
                       cudaStream_t stream) {
  CHECK_LE(di, kMaxDi);
  PoolKernel<<<T, 128, 0, stream>>>(raw, knorm_w, pooled, positions, di, ratio, eps, rotary_dim,
                                    static_cast<float>(theta));
  Q38_CUDA_LAUNCHED();
}

void IndexerSelect(const __half* iq, const __half* pooled, const int64_t* positions, int32_t* sel, float* scratch,
                   int64_t T, int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks,
                   int64_t max_visible_blocks, cudaStream_t stream) {
  CHECK_LE(di, kMaxDi);
  CHECK_LE(heads, kMaxIndexHeads) << "indexer heads";
  const dim3 score_grid(static_cast<unsigned>(T), static_cast<unsigned>(CeilDiv(max_visible_blocks, kScoreBlocksPerCta)));
  const int h = static_cast<int>(heads), d = static_cast<int>(di), r = static_cast<int>(ratio);
  const int k = static_cast<int>(max_blocks);
  ScoreKernel<<<score_grid, kScoreThreads, 0, stream>>>(iq, pooled, positions, scratch, h, d, r, k, max_visible_blocks);
  Q38_CUDA_LAUNCHED();
  SelectKernel<<<T, kSelectThreads, 0, stream>>>(positions, sel, scratch, r, k, max_visible_blocks);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
