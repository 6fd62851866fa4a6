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

// Block = one (token, head) row: the norm by the block as RmsNormKernel does it, then a thread
// per pair, then the cache row; the row is re-read from global memory, which __syncthreads makes
// visible across the block.
template <int kStep>
__global__ void __launch_bounds__(kNormThreads)
    NormRopeKernel(__half* x, const __half* __restrict__ w, const int64_t* __restrict__ positions, int64_t heads,
                   int64_t head_dim, int64_t rotary_dim, float theta, float eps, __half* cache) {
  const int64_t row = blockIdx.x, t = row / heads, half = rotary_dim / 2;
  __half* v = x + row * head_dim;
  RmsNormGroup<__half, kStep>(v, w, v, head_dim, eps, 1.0f);
  __syncthreads();
  const int64_t position = positions[t];
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float a = __half2float(v[i]), b = __half2float(v[i + half]);
    RotatePair(a, b, position, i, rotary_dim, theta);
    v[i] = __float2half(a);
    v[i + half] = __float2half(b);
  }
  if (cache == nullptr) return;
  __syncthreads();
  __half* dst = cache + (position * heads + row % heads) * head_dim;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = v[i];
}

}  // namespace

void NormRope(__half* x, const __half* w, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
              int64_t rotary_dim, double theta, float eps, __half* cache, cudaStream_t stream) {
  const unsigned rows = static_cast<unsigned>(T * heads);
  if (rows == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (head_dim % 8 == 0 && aligned(x) && aligned(w)) {
    NormRopeKernel<8><<<rows, kNormThreads, 0, stream>>>(x, w, positions, heads, head_dim, rotary_dim,
                                                         static_cast<float>(theta), eps, cache);
  } else {
    NormRopeKernel<1><<<rows, kNormThreads, 0, stream>>>(x, w, positions, heads, head_dim, rotary_dim,
                                                         static_cast<float>(theta), eps, cache);
  }
  Q38_CUDA_LAUNCHED();
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
