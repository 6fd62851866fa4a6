// One output of the GDN layers' causal conv (4 taps, dilation 1) for one channel, shared by the
// conv kernel and the fused GDN mixer (kernels/gdn) so that both round exactly alike.
#pragma once

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {

constexpr int kConv4Taps = 4;

// silu(w[0]·hist[0] + w[1]·hist[1] + w[2]·hist[2] + w[3]·in), oldest input first, summed in
// that order in FP32.
__device__ __forceinline__ float Conv4Tap(const float (&w)[kConv4Taps], const float (&hist)[kConv4Taps - 1], float in) {
  float acc = 0;
#pragma unroll
  for (int k = 0; k < kConv4Taps - 1; ++k) acc += w[k] * hist[k];
  acc += w[kConv4Taps - 1] * in;
  return Silu(acc);
}

}  // namespace q38::cuda
