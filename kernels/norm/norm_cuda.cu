#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/norm/norm_cuda.h"
#include "kernels/norm/rms_norm_group.cuh"

namespace q38::cuda {
namespace {

// One block per group (kernels/norm/rms_norm_group.cuh), so y may alias x.
template <typename TX, int kStep>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const TX* x, const __half* __restrict__ w, __half* y, int64_t n, int64_t group, bool w_per_row,
                  float eps, float offset) {
  const int64_t per_row = n / group, gi = blockIdx.x;
  const int64_t g0 = (gi % per_row) * group, base = (gi / per_row) * n + g0;
  RmsNormGroup<TX, kStep>(x + base, w + (w_per_row ? g0 : 0), y + base, group, eps, offset);
}

__global__ void GatedRmsNormKernel(const __half* __restrict__ o, const __half* __restrict__ z,
                                   const __half* __restrict__ w, __half* __restrict__ y, int64_t groups,
                                   int64_t group, float eps, bool sigmoid_gate) {
  const int64_t gi = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (gi >= groups) return;
  const int64_t base = gi * group;
  GatedRmsNormGroup(o + base, z + base, w, y + base, group, eps, sigmoid_gate, threadIdx.x % kWarp);
}

constexpr int kThreads = 256;

template <typename TX>
void LaunchRmsNorm(const TX* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
                   float eps, bool zero_centred, cudaStream_t stream) {
  CHECK(w_len == group || w_len == n) << "RmsNorm weight of " << w_len << " for groups of " << group << " in rows of " << n;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const dim3 grid(static_cast<unsigned>(rows * (n / group)));
  const bool w_per_row = w_len == n && w_len != group;
  const float offset = zero_centred ? 1.0f : 0.0f;
  if (group % 8 == 0 && aligned(x) && aligned(w) && aligned(y)) {
    RmsNormKernel<TX, 8><<<grid, kNormThreads, 0, stream>>>(x, w, y, n, group, w_per_row, eps, offset);
  } else {
    RmsNormKernel<TX, 1><<<grid, kNormThreads, 0, stream>>>(x, w, y, n, group, w_per_row, eps, offset);
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace

void RmsNorm(const __half* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
             float eps, bool zero_centred, cudaStream_t stream) {
  LaunchRmsNorm(x, w, y, rows, n, group, w_len, eps, zero_centred, stream);
}

void RmsNorm(const float* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
             float eps, bool zero_centred, cudaStream_t stream) {
  LaunchRmsNorm(x, w, y, rows, n, group, w_len, eps, zero_centred, stream);
}

void GatedRmsNorm(const __half* o, const __half* z, const __half* w, __half* y, int64_t rows, int64_t n,
                  int64_t group, float eps, bool sigmoid_gate, cudaStream_t stream) {
  const int64_t groups = rows * (n / group);
  GatedRmsNormKernel<<<CeilDiv(groups * kWarp, kThreads), kThreads, 0, stream>>>(o, z, w, y, groups, group, eps,
                                                                                 sigmoid_gate);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
