#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/norm/rms_norm_group.cuh"
#include "kernels/rope/rope_cuda.h"
#include "kernels/rope/rope_device.cuh"

namespace q38::cuda {
namespace {

// One thread per (token, head, pair).
__global__ void RopeKernel(__half* x, const int64_t* __restrict__ positions, int64_t T, int64_t heads,
                           int64_t head_dim, int64_t rotary_dim, float theta) {
  const int64_t half = rotary_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= T * heads * half) return;
  const int64_t i = idx % half, th = idx / half, t = th / heads;
  __half* v = x + th * head_dim;
  float a = __half2float(v[i]), b = __half2float(v[i + half]);
  RotatePair(a, b, positions[t], i, rotary_dim, theta);
  v[i] = __float2half(a);
  v[i + half] = __float2half(b);
}

// One (token, head) row of a tensor by the whole block: the norm as RmsNormKernel does it, then a
// thread per pair, then the cache row; the row is re-read from global memory, which __syncthreads
// makes visible across the block.
template <int kStep>
__device__ __forceinline__ void NormRopeRow(const NormRopeTensor& p, int64_t row, const int64_t* positions,
                                            int64_t rotary_dim, float theta, float eps) {
  const int64_t t = row / p.heads, half = rotary_dim / 2;
  __half* v = p.x + row * p.head_dim;
  RmsNormGroup<__half, kStep>(v, p.w, v, p.head_dim, eps, 1.0f);
  __syncthreads();
  const int64_t position = positions[t];
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float a = __half2float(v[i]), b = __half2float(v[i + half]);
    RotatePair(a, b, position, i, rotary_dim, theta);
    v[i] = __float2half(a);
    v[i + half] = __float2half(b);
  }
  if (p.cache == nullptr) return;
  __syncthreads();
  __half* dst = p.cache + (position * p.heads + row % p.heads) * p.head_dim;
  for (int64_t i = threadIdx.x; i < p.head_dim; i += blockDim.x) dst[i] = v[i];
}

// Block b: row b of the batch's tensors in turn, then token b of its copies in turn.
template <int kStep>
__global__ void __launch_bounds__(kNormThreads)
    NormRopeKernel(NormRopeBatch batch, const int64_t* __restrict__ positions, int64_t T, int64_t rotary_dim,
                   float theta, float eps) {
  int64_t b = blockIdx.x;
  for (const NormRopeTensor& p : batch.tensors) {
    if (b < T * p.heads) {
      NormRopeRow<kStep>(p, b, positions, rotary_dim, theta, eps);
      return;
    }
    b -= T * p.heads;
  }
  for (const RowCopy& c : batch.copies) {
    if (c.src == nullptr) continue;
    if (b < T) {
      const __half* src = c.src + b * c.width;
      __half* dst = c.cache + positions[b] * c.width;
      for (int64_t i = threadIdx.x; i < c.width; i += blockDim.x) dst[i] = src[i];
      return;
    }
    b -= T;
  }
}

// The kernel's step: 16-byte loads where a tensor's rows allow them.
int NormRopeStep(const NormRopeTensor& p) {
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return p.head_dim % 8 == 0 && aligned(p.x) && aligned(p.w) ? 8 : 1;
}

}  // namespace

bool NormRopeBatchFits(const NormRopeBatch& batch) {
  int step = 0;
  for (const NormRopeTensor& p : batch.tensors) {
    if (p.heads == 0) continue;
    if (step != 0 && NormRopeStep(p) != step) return false;
    step = NormRopeStep(p);
  }
  return true;
}

void NormRope(const NormRopeBatch& batch, const int64_t* positions, int64_t T, int64_t rotary_dim, double theta,
              float eps, cudaStream_t stream) {
  CHECK(NormRopeBatchFits(batch)) << "NormRope: tensors that take different steps";
  int64_t blocks = 0;
  int step = 1;
  for (const NormRopeTensor& p : batch.tensors) {
    blocks += T * p.heads;
    if (p.heads != 0) step = NormRopeStep(p);
  }
  for (const RowCopy& c : batch.copies) blocks += c.src != nullptr ? T : 0;
  if (blocks == 0) return;
  const unsigned grid = static_cast<unsigned>(blocks);
  if (step == 8) {
    NormRopeKernel<8><<<grid, kNormThreads, 0, stream>>>(batch, positions, T, rotary_dim, static_cast<float>(theta), eps);
  } else {
    NormRopeKernel<1><<<grid, kNormThreads, 0, stream>>>(batch, positions, T, rotary_dim, static_cast<float>(theta), eps);
  }
  Q38_CUDA_LAUNCHED();
}

void NormRope(__half* x, const __half* w, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
              int64_t rotary_dim, double theta, float eps, __half* cache, cudaStream_t stream) {
  NormRopeBatch batch;
  batch.tensors[0] = {x, w, cache, heads, head_dim};
  NormRope(batch, positions, T, rotary_dim, theta, eps, stream);
}

void Rope(__half* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          double theta, cudaStream_t stream) {
  const int64_t n = T * heads * (rotary_dim / 2);
  if (n == 0) return;
  RopeKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(x, positions, T, heads, head_dim, rotary_dim,
                                                  static_cast<float>(theta));
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
