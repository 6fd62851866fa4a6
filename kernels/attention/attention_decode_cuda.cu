#include "kernels/attention/attention_decode_cuda.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {
namespace {

constexpr int kSplit = static_cast<int>(kDecodeSplitTokens);
static_assert(kSplit == kWarp, "lane l of a warp scores token l of its split");
constexpr int kMaxGroup = 16;  // query heads per KV head: one warp each

template <int kN>
__device__ __forceinline__ void LoadRun(const __half* p, float* v) {
  if constexpr (kN == 8) {
    LoadF<8>(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = __half2float(p[j]);
  }
}

// One step of the transposing butterfly over 2·kOff scores a lane: it keeps the half its lane bit
// kOff names and adds the partner lane's share of that half. After the steps kWarp/2 … 1, v[0]
// of lane l holds the warp's sum of score l (each step fixes one bit of the score's index).
template <int kOff>
__device__ __forceinline__ void ReduceTransposed(float* v, int lane) {
  const bool upper = (lane & kOff) != 0;
#pragma unroll
  for (int i = 0; i < kOff; ++i) {
    const float send = upper ? v[i] : v[i + kOff];
    const float keep = upper ? v[i + kOff] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
  }
  if constexpr (kOff > 1) ReduceTransposed<kOff / 2>(v, lane);
}

// Block (query t, KV head, split): the split's 32 attended tokens (as attended_tokens.cuh: the selected
// blocks' tokens in ascending order, then the tail of the query's own block) have their key and
// value rows staged in shared memory by all threads with every load in flight at once; then warp w
// takes query head w of the group: lane l holds kPer channels, the 32 partial dot products meet in
// one transposing butterfly (31 shuffles) that leaves token l's score on lane l, and the softmax
// and P·V follow from registers and shared memory. Scores, softmax and sums in FP32.
template <int kPer>
__global__ void __launch_bounds__(kMaxGroup * kWarp)
    DecodeAttentionKernel(const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
                          const int32_t* __restrict__ sel, const int64_t* __restrict__ positions,
                          __half* __restrict__ o, float* __restrict__ part, SelectedAttentionDims d, int splits) {
  constexpr int kDh = kPer * kWarp, kChunks = kDh / 8;
  // Keys [kSplit][kDh], then values. A warp reads whole rows, 16 bytes a lane: no bank conflicts.
  extern __shared__ __align__(16) __half rows[];
  __half* ks = rows;
  __half* vs = rows + kSplit * kDh;
  __shared__ int token[kSplit];
  __shared__ int selected;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int kv_heads = static_cast<int>(d.kv_heads), group = static_cast<int>(d.q_heads / d.kv_heads);
  const int t = blockIdx.x / kv_heads, kvh = blockIdx.x % kv_heads, split = blockIdx.y;
  const int ratio = static_cast<int>(d.ratio), max_blocks = static_cast<int>(d.max_blocks);
  const int32_t* s = sel + static_cast<int64_t>(t) * max_blocks;
  const int pos = static_cast<int>(positions[t]), first = split * kSplit;

  const int64_t qh = static_cast<int64_t>(t) * d.q_heads + kvh * group + warp;  // this warp's head
  float qv[kPer];
  LoadRun<kPer>(q + qh * kDh + lane * kPer, qv);

  int id = -1;  // the selected block of this thread's token, while threadIdx.x < kSplit
  if (threadIdx.x < kSplit) {
    const int b = (first + threadIdx.x) / ratio;
    id = b < max_blocks ? s[b] : -1;
  }
  // Past the last selected block (ids are −1 only after it) the tail's place needs their count.
  if (__syncthreads_or(threadIdx.x < kSplit && id < 0)) {
    if (threadIdx.x == 0) selected = 0;
    __syncthreads();
    int mine = 0;
    for (int i = threadIdx.x; i < max_blocks; i += blockDim.x) mine += s[i] >= 0 ? 1 : 0;
    if (mine > 0) atomicAdd(&selected, mine);
    __syncthreads();
  }
  if (threadIdx.x < kSplit) {
    const int i = first + threadIdx.x;
    const int p = id >= 0 ? id * ratio + i % ratio : (pos + 1) / ratio * ratio + (i - selected * ratio);
    token[threadIdx.x] = p <= pos ? p : -1;
  }
  __syncthreads();
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 4
  for (int c = threadIdx.x; c < kSplit * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8, p = token[r];
    const int64_t at = (static_cast<int64_t>(p) * kv_heads + kvh) * kDh + col;
    const uint4 kv = p >= 0 ? __ldg(reinterpret_cast<const uint4*>(kc + at)) : zero;
    const uint4 vv = p >= 0 ? __ldg(reinterpret_cast<const uint4*>(vc + at)) : zero;
    *reinterpret_cast<uint4*>(ks + r * kDh + col) = kv;
    *reinterpret_cast<uint4*>(vs + r * kDh + col) = vv;
  }
  __syncthreads();

  const float scale = rsqrtf(static_cast<float>(kDh));
#pragma unroll
  for (int j = 0; j < kPer; ++j) qv[j] *= scale;
  float sc[kSplit];
#pragma unroll
  for (int r = 0; r < kSplit; ++r) {
    float kr[kPer];
    LoadRun<kPer>(ks + r * kDh + lane * kPer, kr);
    float dot = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) dot += qv[j] * kr[j];
    sc[r] = dot;
  }
  ReduceTransposed<kWarp / 2>(sc, lane);
  const bool valid = token[lane] >= 0;
  const float score = valid ? sc[0] : -INFINITY;
  const float m = WarpMax(score);
  const float pr = valid ? __expf(score - m) : 0.0f;
  const float l = WarpSum(pr);
  float acc[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int r = 0; r < kSplit; ++r) {
    const float pj = __shfl_sync(0xffffffffu, pr, r);
    float vr[kPer];
    LoadRun<kPer>(vs + r * kDh + lane * kPer, vr);
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[j] += pj * vr[j];
  }
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) o[qh * kDh + lane * kPer + j] = __float2half(acc[j] / l);
    return;
  }
  float* pp = part + (qh * splits + split) * (kDh + 2);
  if (lane == 0) {
    pp[0] = m;  // −∞ with l = 0 where the split holds no token: the merge skips it
    pp[1] = l;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) pp[2 + lane * kPer + j] = acc[j];
}

template <int kPer>
void Launch(const __half* q, const __half* kc, const __half* vc, const int32_t* sel, const int64_t* positions,
            __half* o, float* part, int64_t T, int64_t splits, const SelectedAttentionDims& d, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(T * d.kv_heads), static_cast<unsigned>(splits));
  const unsigned threads = static_cast<unsigned>(d.q_heads / d.kv_heads * kWarp);
  const size_t shared = 2 * kSplit * kPer * kWarp * sizeof(__half);
  DecodeAttentionKernel<kPer><<<grid, threads, shared, stream>>>(q, kc, vc, sel, positions, o, part, d,
                                                                 static_cast<int>(splits));
}

}  // namespace

bool DecodeAttentionFits(const __half* q, const __half* kcache, const __half* vcache, const SelectedAttentionDims& d) {
  const bool dh = d.head_dim == 32 || d.head_dim == 64 || d.head_dim == 128 || d.head_dim == 256;
  return dh && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0 && d.q_heads / d.kv_heads <= kMaxGroup &&
         Aligned16(q) && Aligned16(kcache) && Aligned16(vcache);
}

void DecodeAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                     const int64_t* positions, __half* o, float* part, int64_t T, int64_t splits,
                     const SelectedAttentionDims& d, cudaStream_t stream) {
  switch (d.head_dim) {
    case 32: Launch<1>(q, kcache, vcache, sel, positions, o, part, T, splits, d, stream); break;
    case 64: Launch<2>(q, kcache, vcache, sel, positions, o, part, T, splits, d, stream); break;
    case 128: Launch<4>(q, kcache, vcache, sel, positions, o, part, T, splits, d, stream); break;
    case 256: Launch<8>(q, kcache, vcache, sel, positions, o, part, T, splits, d, stream); break;
    default: LOG(FATAL) << "head_dim " << d.head_dim << " has no decode attention kernel (32, 64, 128, 256)";
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
