#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/logits/logits_cuda.h"

namespace q38::cuda {
namespace {

constexpr int kArgThreads = 256, kArgWarps = kArgThreads / kWarp;

// Whether (v2, i2) beats (v, i): larger, or as large at a lower index. An entry with index −1 (none
// yet) holds −inf, which no real entry holds (only values above −inf are taken), so a real entry
// always beats it and two "none"s stay "none". A NaN is never taken in the first place.
__device__ __forceinline__ void Take(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 >= 0 && i2 < i)) {
    v = v2;
    i = i2;
  }
}

// The block's best of (v, i) over its threads; thread 0 gets it.
__device__ __forceinline__ void BlockBest(float& v, int& i) {
  __shared__ float sv[kArgWarps];
  __shared__ int si[kArgWarps];
  for (int o = kWarp / 2; o > 0; o >>= 1) Take(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / kWarp); ++w) Take(v, i, sv[w], si[w]);
  }
}

__global__ void __launch_bounds__(kArgThreads)
    ArgMaxPartKernel(const __half* __restrict__ x, int valid, int per_block, float* part) {
  const int begin = blockIdx.x * per_block, end = min(valid, begin + per_block);
  float v = -INFINITY;
  int i = -1;
  // Ascending within a thread, strict: the lowest index of a tie; false for NaN.
  for (int k = begin + threadIdx.x; k < end; k += kArgThreads) {
    const float f = __half2float(x[k]);
    if (f > v) {
      v = f;
      i = k;
    }
  }
  BlockBest(v, i);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = v;
    reinterpret_cast<int*>(part)[2 * blockIdx.x + 1] = i;  // the index's bits, as an int
  }
}

__global__ void __launch_bounds__(kArgThreads) ArgMaxFinalKernel(const float* part, int parts, float* out) {
  float v = -INFINITY;
  int i = -1;
  for (int p = threadIdx.x; p < parts; p += kArgThreads) Take(v, i, part[2 * p], reinterpret_cast<const int*>(part)[2 * p + 1]);
  BlockBest(v, i);
  if (threadIdx.x == 0) {
    out[0] = v;
    out[1] = static_cast<float>(i);
  }
}


// A thread's running (m, s) of TopLogits: the largest value and Σ exp(x − m), with the +inf limit.
__device__ __forceinline__ float Rescale(float from, float to) { return from == to ? 1.0f : expf(from - to); }
__device__ __forceinline__ void AddSum(float& m, float& s, float m2, float s2) {
  const float top = fmaxf(m, m2);
  if (top == -INFINITY) return;
  s = (s > 0 ? s * Rescale(m, top) : 0.0f) + (s2 > 0 ? s2 * Rescale(m2, top) : 0.0f);
  m = top;
}

// A thread's k best values seen so far, largest first. Values arrive in ascending index order
// (a later equal value loses, so strict compares keep ArgMax's ties).
struct ThreadTop {
  float v[kMaxTopLogits];
  int i[kMaxTopLogits];
  int held = 0;

  __device__ __forceinline__ void Offer(float f, int index, int k) {
    if (held == k && !(f > v[k - 1])) return;
    int j = held < k ? held++ : k - 1;
    for (; j > 0 && f > v[j - 1]; --j) {
      v[j] = v[j - 1];
      i[j] = i[j - 1];
    }
    v[j] = f;
    i[j] = index;
  }
};

// The block's k best of its threads' lists into out[0, k) and their indices into out[k, 2k) (−1
// past the values held): k rounds of BlockBest over the heads, the thread that held each winner
// moving on. Then the block's (m, s) into out[2k], out[2k + 1].
__device__ void BlockTopLogits(ThreadTop& t, float m, float s, int k, float* out) {
  __shared__ int winner;
  int head = 0;
  for (int r = 0; r < k; ++r) {
    float v = head < t.held ? t.v[head] : -INFINITY;
    int i = head < t.held ? t.i[head] : -1;
    BlockBest(v, i);
    if (threadIdx.x == 0) {
      winner = i;
      out[r] = v;
      out[k + r] = static_cast<float>(i);
    }
    __syncthreads();
    if (head < t.held && t.i[head] == winner) ++head;
    __syncthreads();
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) AddSum(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  __shared__ float wm[kArgWarps], ws[kArgWarps];
  if (threadIdx.x % kWarp == 0) {
    wm[threadIdx.x / kWarp] = m;
    ws[threadIdx.x / kWarp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgWarps; ++w) AddSum(m, s, wm[w], ws[w]);
    out[2 * k] = m;
    out[2 * k + 1] = s;
  }
}

// Each block reduces a contiguous part of x to its TopLogits summary, 2k + 2 floats in `part`.
__global__ void __launch_bounds__(kArgThreads)
    TopLogitsPartKernel(const __half* __restrict__ x, int valid, int per_block, int k, float* part) {
  const int begin = blockIdx.x * per_block, end = min(valid, begin + per_block);
  ThreadTop t;
  float m = -INFINITY, s = 0.0f;
  for (int i = begin + threadIdx.x; i < end; i += kArgThreads) {
    const float f = __half2float(x[i]);
    if (!(f > -INFINITY)) continue;  // −inf and NaN
    AddSum(m, s, f, 1.0f);
    t.Offer(f, i, k);
  }
  BlockTopLogits(t, m, s, k, part + blockIdx.x * (2 * k + 2));
}

// One block merges the parts' summaries. A thread walks the candidates in (part, rank) order,
// which is ascending index order among equal values (parts hold ascending ranges, and a part
// ranks its ties by index), so Offer keeps the ties right.
__global__ void __launch_bounds__(kArgThreads) TopLogitsFinalKernel(const float* part, int parts, int k, float* out) {
  ThreadTop t;
  float m = -INFINITY, s = 0.0f;
  const int stride = 2 * k + 2;
  for (int c = threadIdx.x; c < parts * k; c += kArgThreads) {
    const float* p = part + (c / k) * stride;
    const int index = static_cast<int>(p[k + c % k]);
    if (index >= 0) t.Offer(p[c % k], index, k);
  }
  for (int p = threadIdx.x; p < parts; p += kArgThreads) AddSum(m, s, part[p * stride + 2 * k], part[p * stride + 2 * k + 1]);
  BlockTopLogits(t, m, s, k, out);
}
}  // namespace

void ArgMax(const __half* x, int64_t valid, float* out, float* scratch, cudaStream_t stream) {
  CHECK(valid >= 0 && valid < (int64_t{1} << 24)) << "ArgMax over " << valid << " values";
  // Parts of at least 2,048 values (8 a thread), at most kArgMaxBlocks of them.
  const int64_t per_block = std::max<int64_t>(2048, CeilDiv(valid, kArgMaxBlocks));
  const int blocks = static_cast<int>(std::max<int64_t>(1, CeilDiv(valid, per_block)));
  ArgMaxPartKernel<<<blocks, kArgThreads, 0, stream>>>(x, static_cast<int>(valid), static_cast<int>(per_block), scratch);
  Q38_CUDA_LAUNCHED();
  ArgMaxFinalKernel<<<1, kArgThreads, 0, stream>>>(scratch, blocks, out);
  Q38_CUDA_LAUNCHED();
}

void TopLogits(const __half* x, int64_t valid, int64_t k, float* out, float* scratch, cudaStream_t stream) {
  CHECK(valid >= 0 && valid < (int64_t{1} << 24) && k >= 1 && k <= kMaxTopLogits) << "TopLogits of " << k << " over " << valid;
  // ArgMax's parts: at least 2,048 values, at most kArgMaxBlocks of them.
  const int64_t per_block = std::max<int64_t>(2048, CeilDiv(valid, kArgMaxBlocks));
  const int blocks = static_cast<int>(std::max<int64_t>(1, CeilDiv(valid, per_block)));
  TopLogitsPartKernel<<<blocks, kArgThreads, 0, stream>>>(x, static_cast<int>(valid), static_cast<int>(per_block),
                                                          static_cast<int>(k), scratch);
  Q38_CUDA_LAUNCHED();
  TopLogitsFinalKernel<<<1, kArgThreads, 0, stream>>>(scratch, blocks, static_cast<int>(k), out);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
