#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/hc/hc_cuda.h"

namespace q38::cuda {
namespace {

__global__ void EmbedStreamsKernel(const __half* __restrict__ table, const int32_t* __restrict__ ids,
                                   float* __restrict__ X, int64_t T, int64_t S, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * S * H) return;
  const int64_t t = i / (S * H), c = i % H;
  X[i] = __half2float(table[static_cast<int64_t>(ids[t]) * H + c]);
}

__global__ void HcGatesKernel(const __half* __restrict__ di, __half* __restrict__ a, __half* __restrict__ g, int64_t T,
                              int64_t R, int64_t S, bool inject) {
  const int64_t width = R + (inject ? S : 0);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * width) return;
  const int64_t t = i / width, c = i % width;
  const float v = __half2float(di[i]) / static_cast<float>(S);
  if (c < R) {
    a[t * R + c] = __float2half(Silu(v));
  } else {
    g[t * S + (c - R)] = __float2half(2.0f * Sigmoid(v));
  }
}

__global__ void HcCombineKernel(const __half* __restrict__ m, const __half* __restrict__ xn, __half* __restrict__ h,
                                int64_t T, int64_t S, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, c = i % H;
  float acc = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t j = (t * S + s) * H + c;
    acc += Sigmoid(__half2float(m[j])) * __half2float(xn[j]);
  }
  h[i] = __float2half(acc / static_cast<float>(S));
}

__global__ void HcResidualKernel(float* X, const __half* __restrict__ g, const __half* __restrict__ y, int64_t T,
                                 int64_t S, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * S * H) return;
  const int64_t ts = i / H, t = ts / S, c = i % H;
  X[i] += __half2float(g[ts]) * __half2float(y[t * H + c]);
}

}  // namespace

void EmbedStreams(const __half* table, const int32_t* ids, float* X, int64_t T, int64_t S, int64_t H,
                  cudaStream_t stream) {
  EmbedStreamsKernel<<<CeilDiv(T * S * H, 256), 256, 0, stream>>>(table, ids, X, T, S, H);
  Q38_CUDA_LAUNCHED();
}

void HcGates(const __half* di, __half* a, __half* g, int64_t T, int64_t R, int64_t S, bool inject, cudaStream_t stream) {
  const int64_t n = T * (R + (inject ? S : 0));
  HcGatesKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(di, a, g, T, R, S, inject);
  Q38_CUDA_LAUNCHED();
}

void HcCombine(const __half* m, const __half* xn, __half* h, int64_t T, int64_t S, int64_t H, cudaStream_t stream) {
  HcCombineKernel<<<CeilDiv(T * H, 256), 256, 0, stream>>>(m, xn, h, T, S, H);
  Q38_CUDA_LAUNCHED();
}

void HcResidual(float* X, const __half* g, const __half* y, int64_t T, int64_t S, int64_t H, cudaStream_t stream) {
  HcResidualKernel<<<CeilDiv(T * S * H, 256), 256, 0, stream>>>(X, g, y, T, S, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
