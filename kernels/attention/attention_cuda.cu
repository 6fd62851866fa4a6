#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attended_tokens.cuh"
#include "kernels/attention/attention_decode_cuda.h"
#include "kernels/attention/attention_prefill_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/rope/rope_device.cuh"

namespace q38::cuda {
namespace {

constexpr int kMaxDi = 256;

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

// Exclusive prefix sum over the block of one int per thread (blockDim.x = 256); total in *sum.
__device__ int BlockExclusiveScan(int x, int* sum) {
  __shared__ int warp_sums[8];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int incl = x;
  for (int o = 1; o < kWarp; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == kWarp - 1) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0, total = 0;
  for (int i = 0; i < 8; ++i) {
    if (i < warp) before += warp_sums[i];
    total += warp_sums[i];
  }
  *sum = total;
  return before + incl - x;
}

constexpr int kSelectThreads = 256;

// Scores, order-preserving as unsigned keys, so the k-th largest is found by radix selection.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kScoreBlocksPerCta = 64;

// Block scores of every query that selects sparsely, spread over (query, run of 64 block ids) so
// that a single decode query still fills the GPU: one warp per block id at a time.
__global__ void __launch_bounds__(kSelectThreads)
    ScoreKernel(const __half* __restrict__ iq, const __half* __restrict__ pooled, const int64_t* __restrict__ positions,
                float* scratch, int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks, int64_t scratch_stride) {
  const int64_t t = blockIdx.x;
  const int64_t nb = (positions[t] + 1) / ratio;
  if (nb <= max_blocks) return;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const float inv_sqrt = rsqrtf(static_cast<float>(di));
  const __half* q = iq + t * heads * di;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kScoreBlocksPerCta;
  for (int64_t b = first + warp; b < min(nb, first + kScoreBlocksPerCta); b += warps) {
    float s = 0;
    for (int64_t h = 0; h < heads; ++h) {
      float dot = 0;
      for (int64_t c = lane; c < di; c += kWarp) dot += __half2float(q[h * di + c]) * __half2float(pooled[b * di + c]);
      s += fmaxf(WarpSum(dot), 0.0f);
    }
    if (lane == 0) scratch[t * scratch_stride + b] = s * inv_sqrt;
  }
}

// One block per query: when the visible complete blocks do not all fit, the top max_blocks by
// score (ScoreKernel's), ties to the lower block id, written in ascending id order.
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(const int64_t* __restrict__ positions, int32_t* __restrict__ sel, const float* scratch, int64_t ratio,
                 int64_t max_blocks, int64_t scratch_stride) {
  const int64_t t = blockIdx.x;
  const int64_t nb = (positions[t] + 1) / ratio;
  int32_t* out = sel + t * max_blocks;
  if (nb <= max_blocks) {
    for (int64_t i = threadIdx.x; i < max_blocks; i += blockDim.x) out[i] = i < nb ? static_cast<int32_t>(i) : -1;
    return;
  }
  const float* score = scratch + t * scratch_stride;
  // Radix selection of the k-th largest key, 8 bits at a time from the top.
  __shared__ int hist[256];
  __shared__ uint32_t prefix_sh;
  __shared__ int need_sh;
  uint32_t prefix = 0, mask = 0;
  int need = static_cast<int>(max_blocks);
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
      const uint32_t key = OrderKey(score[b]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, digit = 255;
      for (; digit > 0 && above + hist[digit] < need; --digit) above += hist[digit];
      prefix_sh = prefix | (static_cast<uint32_t>(digit) << shift);
      need_sh = need - above;
    }
    __syncthreads();
    prefix = prefix_sh;
    need = need_sh;
    mask |= 255u << shift;
    __syncthreads();
  }
  // prefix is the k-th largest key; take every key above it and the `need` lowest ids equal to it.
  int taken = 0, equal_seen = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += blockDim.x) {
    const int64_t b = b0 + threadIdx.x;
    const uint32_t key = b < nb ? OrderKey(score[b]) : 0;
    const int eq = (b < nb && key == prefix) ? 1 : 0;
    int eq_total, sel_total;
    const int eq_rank = equal_seen + BlockExclusiveScan(eq, &eq_total);
    const int chosen = (b < nb && (key > prefix || (eq && eq_rank < need))) ? 1 : 0;
    const int slot = taken + BlockExclusiveScan(chosen, &sel_total);
    if (chosen) out[slot] = static_cast<int32_t>(b);
    taken += sel_total;
    equal_seen += eq_total;
  }
}

constexpr int kAttnWarps = 4;
constexpr int kMaxDhPerLane = 8;  // head_dim ≤ 256

// Block (query t, head h, split): online softmax over the split's tokens, a warp per token at a
// time; the warps merge, then the block writes the split's max, sum and unnormalized output
// (or, with one split, the output itself).
template <int kPerLane>
__global__ void __launch_bounds__(kAttnWarps * kWarp)
    AttentionKernel(const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
                    const int32_t* __restrict__ sel, const int64_t* __restrict__ positions, __half* __restrict__ o,
                    float* __restrict__ part, SelectedAttentionDims d, int64_t splits) {
  const int64_t t = blockIdx.x / d.q_heads, h = blockIdx.x % d.q_heads, split = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  constexpr int per_lane = kPerLane;  // head_dim / 32, fixed so that qv and acc stay in registers
  const int64_t dh = d.head_dim, kvh = h / (d.q_heads / d.kv_heads);
  const AttendedTokens att(sel + t * d.max_blocks, d.max_blocks, d.ratio, positions[t]);
  const int64_t total = att.total;
  const int64_t per_split = CeilDivDevice(total, splits);
  const int64_t begin = split * per_split, end = min(total, begin + per_split);
  const float scale = rsqrtf(static_cast<float>(dh));
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    qv[i] = __half2float(q[(t * d.q_heads + h) * dh + lane + i * kWarp]) * scale;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t i = begin + warp; i < end; i += kAttnWarps) {
    const int64_t tok = att[i];
    const __half* kr = kc + (tok * d.kv_heads + kvh) * dh;
    float dot = 0;
#pragma unroll
    for (int j = 0; j < per_lane; ++j) dot += qv[j] * __half2float(kr[lane + j * kWarp]);
    dot = WarpSum(dot);
    const float m_new = fmaxf(m, dot), corr = __expf(m - m_new), pexp = __expf(dot - m_new);
    l = l * corr + pexp;
    const __half* vr = vc + (tok * d.kv_heads + kvh) * dh;
#pragma unroll
    for (int j = 0; j < per_lane; ++j) acc[j] = acc[j] * corr + pexp * __half2float(vr[lane + j * kWarp]);
    m = m_new;
  }
  // Merge the warps.
  __shared__ float ms[kAttnWarps], ls[kAttnWarps];
  __shared__ float accs[kAttnWarps][kMaxDhPerLane * kWarp];
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < per_lane; ++j) accs[warp][lane + j * kWarp] = acc[j];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, ms[w]);
  float L = 0;
  for (int w = 0; w < kAttnWarps; ++w) L += ms[w] == -INFINITY ? 0.0f : ls[w] * __expf(ms[w] - M);
  for (int64_t c = threadIdx.x; c < dh; c += blockDim.x) {
    float a = 0;
    for (int w = 0; w < kAttnWarps; ++w) a += ms[w] == -INFINITY ? 0.0f : accs[w][c] * __expf(ms[w] - M);
    if (splits == 1) {
      o[(t * d.q_heads + h) * dh + c] = __float2half(a / L);
    } else {
      part[((t * d.q_heads + h) * splits + split) * (dh + 2) + 2 + c] = a;
    }
  }
  if (splits > 1 && threadIdx.x == 0) {
    float* pp = part + ((t * d.q_heads + h) * splits + split) * (dh + 2);
    pp[0] = M;
    pp[1] = L;
  }
}

// Merges the splits of each (query, head): block (query head, run of kMergeChannels channels),
// a thread a channel. The splits' maxima and sums go to shared memory in one parallel read, and
// each channel's loads are issued kCombineUnroll at a time, so the merge costs a few memory round
// trips rather than three per split; every sum keeps the split order.
constexpr int kCombineUnroll = 16, kMergeChannels = 64;
__global__ void __launch_bounds__(kMergeChannels)
    AttentionCombineKernel(const float* __restrict__ part, __half* __restrict__ o, int64_t dh, int64_t splits) {
  extern __shared__ float split_stats[];  // [splits] maxima, [splits] sums, [splits] exp(m − M)
  float *ms = split_stats, *ls = ms + splits, *es = ls + splits;
  const float* pp = part + static_cast<int64_t>(blockIdx.x) * splits * (dh + 2);
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    ms[s] = pp[s * (dh + 2)];
    ls[s] = pp[s * (dh + 2) + 1];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) M = fmaxf(M, ms[s]);
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) es[s] = ms[s] != -INFINITY ? __expf(ms[s] - M) : 0.0f;
  __syncthreads();
  float L = 0;
  for (int64_t s = 0; s < splits; ++s) {
    if (ms[s] != -INFINITY) L += ls[s] * es[s];
  }
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kMergeChannels + threadIdx.x;
  if (c >= dh) return;
  float a = 0;
#pragma unroll kCombineUnroll
  for (int64_t s = 0; s < splits; ++s) {
    const float v = pp[s * (dh + 2) + 2 + c];
    if (ms[s] != -INFINITY) a += v * es[s];
  }
  o[static_cast<int64_t>(blockIdx.x) * dh + c] = __float2half(a / L);
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
  const dim3 score_grid(static_cast<unsigned>(T), static_cast<unsigned>(CeilDiv(max_visible_blocks, kScoreBlocksPerCta)));
  ScoreKernel<<<score_grid, kSelectThreads, 0, stream>>>(iq, pooled, positions, scratch, heads, di, ratio, max_blocks,
                                                         max_visible_blocks);
  Q38_CUDA_LAUNCHED();
  SelectKernel<<<T, kSelectThreads, 0, stream>>>(positions, sel, scratch, ratio, max_blocks, max_visible_blocks);
  Q38_CUDA_LAUNCHED();
}

// Up to this many queries a call is decode-like: few (query, head) pairs, so the context is
// split to give every SM work. Prefill has plenty without, and its query heads share each KV
// row on tensor cores (attention_prefill_cuda.h).
constexpr int64_t kSplitQueries = 16;

int64_t AttentionSplits(int64_t T, const SelectedAttentionDims& d) {
  if (T > kSplitQueries) return 1;
  return CeilDiv(d.max_blocks * d.ratio + d.ratio, kDecodeSplitTokens);
}

int64_t AttentionScratchFloats(int64_t T, const SelectedAttentionDims& d) {
  const int64_t splits = AttentionSplits(T, d);
  return splits == 1 ? 0 : T * d.q_heads * splits * (d.head_dim + 2);
}

void QueryHeadAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                        const int64_t* positions, __half* o, float* part, int64_t T, int64_t splits,
                        const SelectedAttentionDims& d, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T * d.q_heads), static_cast<unsigned>(splits));
  switch (d.head_dim / kWarp) {
    case 1:
      AttentionKernel<1><<<grid, kAttnWarps * kWarp, 0, stream>>>(q, kcache, vcache, sel, positions, o, part, d, splits);
      break;
    case 2:
      AttentionKernel<2><<<grid, kAttnWarps * kWarp, 0, stream>>>(q, kcache, vcache, sel, positions, o, part, d, splits);
      break;
    case 4:
      AttentionKernel<4><<<grid, kAttnWarps * kWarp, 0, stream>>>(q, kcache, vcache, sel, positions, o, part, d, splits);
      break;
    case 8:
      AttentionKernel<8><<<grid, kAttnWarps * kWarp, 0, stream>>>(q, kcache, vcache, sel, positions, o, part, d, splits);
      break;
    default:
      LOG(FATAL) << "head_dim " << d.head_dim << " has no attention kernel (32, 64, 128, 256)";
  }
  Q38_CUDA_LAUNCHED();
}

void SelectedAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                       const int64_t* positions, __half* o, float* scratch, int64_t T,
                       const SelectedAttentionDims& d, cudaStream_t stream) {
  if (T > kSplitQueries && GroupedAttentionFits(q, kcache, vcache, d)) {
    GroupedAttention(q, kcache, vcache, sel, positions, o, T, d, stream);
    return;
  }
  // Decode's splits cover the most tokens a query can attend; prefill's one split only the
  // query-head kernel covers whole.
  const int64_t splits = AttentionSplits(T, d);
  if (T <= kSplitQueries && DecodeAttentionFits(q, kcache, vcache, d)) {
    DecodeAttention(q, kcache, vcache, sel, positions, o, scratch, T, splits, d, stream);
  } else {
    QueryHeadAttention(q, kcache, vcache, sel, positions, o, scratch, T, splits, d, stream);
  }
  if (splits > 1) AttentionMerge(scratch, o, T, d.q_heads, d.head_dim, splits, stream);
}

void AttentionMerge(const float* part, __half* o, int64_t T, int64_t q_heads, int64_t head_dim, int64_t splits,
                    cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T * q_heads), static_cast<unsigned>(CeilDiv(head_dim, kMergeChannels)));
  AttentionCombineKernel<<<grid, kMergeChannels, 3 * splits * sizeof(float), stream>>>(part, o, head_dim, splits);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
