// The RMSNorm of one group by a whole block, shared by the norm kernels and the fused ones that
// normalize before they go on (kernels/rope, NormRope), so that both round exactly alike; and the
// gated RMSNorm of one group by a warp, shared likewise with the fused GDN mixer (kernels/gdn).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {

constexpr int kNormThreads = 256;

// RmsNormGroup's x as it is read.
struct KeepRow {
  __device__ __forceinline__ void operator()(int64_t, float*) const {}
};

// y[0..group) = x · 1/RMS(x) · (offset + w), the sum of squares over the block, then every element
// scaled by the thread that read it, so y may alias x. A group is a few thousand elements at
// most, so each thread has only a few 16-byte loads in flight: a warp per group would wait on ~80
// dependent loads in turn (ncu: 40 µs per call at the model's H). Every thread of the block calls
// it; kStep 8 needs 16-byte aligned x, w and y. update(i, v) may change the kStep values read at
// x + i before they count, storing them back to x (the fused residual update, kernels/hc): the
// second pass reads them as stored by the same thread.
template <typename TX, int kStep, typename Update = KeepRow>
__device__ __forceinline__ void RmsNormGroup(const TX* x, const __half* __restrict__ w, __half* y, int64_t group,
                                             float eps, float offset, Update update = {}) {
  float ss = 0;
  for (int64_t i = threadIdx.x * kStep; i < group; i += blockDim.x * kStep) {
    float v[kStep];
    LoadF<kStep>(x + i, v);
    update(i, v);
#pragma unroll
    for (int j = 0; j < kStep; ++j) ss += v[j] * v[j];
  }
  const float inv = rsqrtf(BlockSum(ss) / group + eps);
  for (int64_t i = threadIdx.x * kStep; i < group; i += blockDim.x * kStep) {
    float v[kStep], wv[kStep];
    LoadF<kStep>(x + i, v);
    LoadF<kStep>(w + i, wv);
#pragma unroll
    for (int j = 0; j < kStep; ++j) v[j] *= inv * (offset + wv[j]);
    StoreHalves<kStep>(y + i, v);
  }
}

// y[i] = o[i] · 1/RMS(o) · w[i] · gate(z[i]) over one group by one warp (lane l takes l, l + 32, …;
// the squares summed lane-strided, then across the warp); gate is sigmoid or SiLU. kPastL1 reads
// o from L2 (other blocks of the same kernel wrote it).
template <bool kPastL1 = false>
__device__ __forceinline__ void GatedRmsNormGroup(const __half* o, const __half* __restrict__ z,
                                                  const __half* __restrict__ w, __half* __restrict__ y, int64_t group,
                                                  float eps, bool sigmoid_gate, int lane) {
  const auto at = [&](int64_t i) { return __half2float(kPastL1 ? __ldcg(o + i) : o[i]); };
  float ss = 0;
  for (int64_t i = lane; i < group; i += kWarp) {
    const float v = at(i);
    ss += v * v;
  }
  const float inv = rsqrtf(WarpSum(ss) / group + eps);
  for (int64_t i = lane; i < group; i += kWarp) {
    const float zv = __half2float(z[i]);
    const float gate = sigmoid_gate ? Sigmoid(zv) : Silu(zv);
    y[i] = __float2half(at(i) * inv * __half2float(w[i]) * gate);
  }
}

}  // namespace q38::cuda
