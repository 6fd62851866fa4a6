#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attended_tokens.cuh"
#include "kernels/attention/attention_decode_cuda.h"
#include "kernels/attention/attention_prefill_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"

namespace q38::cuda {
namespace {

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
    AttentionCombineKernel(const float* __restrict__ part, __half* __restrict__ o, const __half* __restrict__ gate,
                           int64_t dh, int64_t splits) {
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
  const int64_t at = static_cast<int64_t>(blockIdx.x) * dh + c;
  const __half merged = __float2half(a / L);
  // The output gate as SigmoidMul applies it to the merged, rounded value.
  o[at] = gate != nullptr ? __float2half(__half2float(merged) * Sigmoid(__half2float(gate[at]))) : merged;
}

}  // namespace

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
                       const SelectedAttentionDims& d, cudaStream_t stream, const __half* gate) {
  if (T > kSplitQueries && GroupedAttentionFits(q, kcache, vcache, d)) {
    GroupedAttention(q, kcache, vcache, sel, positions, o, T, d, stream);
    if (gate != nullptr) SigmoidMul(o, gate, T * d.q_heads * d.head_dim, stream);
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
  if (splits > 1) {
    AttentionMerge(scratch, o, T, d.q_heads, d.head_dim, splits, stream, gate);
  } else if (gate != nullptr) {
    SigmoidMul(o, gate, T * d.q_heads * d.head_dim, stream);
  }
}

void AttentionMerge(const float* part, __half* o, int64_t T, int64_t q_heads, int64_t head_dim, int64_t splits,
                    cudaStream_t stream, const __half* gate) {
  const dim3 grid(static_cast<unsigned>(T * q_heads), static_cast<unsigned>(CeilDiv(head_dim, kMergeChannels)));
  AttentionCombineKernel<<<grid, kMergeChannels, 3 * splits * sizeof(float), stream>>>(part, o, gate, head_dim,
                                                                                         splits);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
