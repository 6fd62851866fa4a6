#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/norm/norm_cuda.h"

namespace q38::cuda {
namespace {

// 1/RMS of group[0..n) for a whole warp.
__device__ __forceinline__ float GroupInvRms(const __half* group, int64_t n, float eps, int lane) {
  float ss = 0;
  for (int64_t i = lane; i < n; i += kWarp) {
    const float v = __half2float(group[i]);
    ss += v * v;
  }
  return rsqrtf(WarpSum(ss) / n + eps);
}

// One warp per group: the sum of squares, then every element scaled by the same lane that read
// it, so y may alias x.
__global__ void RmsNormKernel(const __half* x, const __half* __restrict__ w, __half* y, int64_t groups, int64_t n,
                              int64_t group, int64_t w_len, float eps, float offset) {
  const int lane = threadIdx.x % kWarp;
  const int64_t gi = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (gi >= groups) return;
  const int64_t per_row = n / group, base = (gi / per_row) * n + (gi % per_row) * group, g0 = (gi % per_row) * group;
  const float inv = GroupInvRms(x + base, group, eps, lane);
  for (int64_t i = lane; i < group; i += kWarp) {
    y[base + i] = __float2half(__half2float(x[base + i]) * inv * (offset + __half2float(w[(g0 + i) % w_len])));
  }
}

__global__ void GatedRmsNormKernel(const __half* __restrict__ o, const __half* __restrict__ z,
                                   const __half* __restrict__ w, __half* __restrict__ y, int64_t groups,
                                   int64_t group, float eps, bool sigmoid_gate) {
  const int lane = threadIdx.x % kWarp;
  const int64_t gi = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (gi >= groups) return;
  const int64_t base = gi * group;
  const float inv = GroupInvRms(o + base, group, eps, lane);
  for (int64_t i = lane; i < group; i += kWarp) {
    const float zv = __half2float(z[base + i]);
    const float gate = sigmoid_gate ? Sigmoid(zv) : Silu(zv);
    y[base + i] = __float2half(__half2float(o[base + i]) * inv * __half2float(w[i]) * gate);
  }
}

constexpr int kThreads = 256;

}  // namespace

void RmsNorm(const __half* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
             float eps, bool zero_centred, cudaStream_t stream) {
  const int64_t groups = rows * (n / group);
  RmsNormKernel<<<CeilDiv(groups * kWarp, kThreads), kThreads, 0, stream>>>(x, w, y, groups, n, group, w_len, eps,
                                                                             zero_centred ? 1.0f : 0.0f);
  Q38_CUDA_LAUNCHED();
}

void GatedRmsNorm(const __half* o, const __half* z, const __half* w, __half* y, int64_t rows, int64_t n,
                  int64_t group, float eps, bool sigmoid_gate, cudaStream_t stream) {
  const int64_t groups = rows * (n / group);
  GatedRmsNormKernel<<<CeilDiv(groups * kWarp, kThreads), kThreads, 0, stream>>>(o, z, w, y, groups, group, eps,
                                                                                 sigmoid_gate);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
