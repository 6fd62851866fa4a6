// Pieces of the delta rule's decode step shared by GdnDeltaRuleKernel (gdn_cuda.cu) and the
// one-kernel GDN mixer (gdn_grid_cuda.cu), so that both compute alike.
#pragma once

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::gdn {

// 1/‖q‖ and 1/‖k‖ of a token (kDk floats each in shared memory) into norms[0] and norms[1]:
// warp 0 sums q, warp 1 sums k, each lane its strided squares, then across the warp. Every
// thread of the block must call it (it ends at a barrier).
template <int kDk>
__device__ __forceinline__ void QkInvNorms(const float* qs, const float* ks, float* norms) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (warp < 2) {
    const float* v = warp == 0 ? qs : ks;
    float ss = 0;
    for (int i = lane; i < kDk; i += kWarp) ss += v[i] * v[i];
    ss = WarpSum(ss);
    if (lane == 0) norms[warp] = rsqrtf(ss + 1e-6f);
  }
  __syncthreads();
}

}  // namespace q38::cuda::gdn
