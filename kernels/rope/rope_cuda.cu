#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
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

}  // namespace

void Rope(__half* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          double theta, cudaStream_t stream) {
  const int64_t n = T * heads * (rotary_dim / 2);
  if (n == 0) return;
  RopeKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(x, positions, T, heads, head_dim, rotary_dim,
                                                  static_cast<float>(theta));
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
