// The router's top-k for one token by one warp, shared by the router kernel (moe_cuda.cu) and the
// one-kernel MoE block (moe_grid_cuda.cu), so that both choose the same experts bit for bit.
#pragma once

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace q38::cuda::moe_route {

constexpr int kPerLane = 16;
constexpr int kMaxExperts = kWarp * kPerLane;

// (v, e) beats (ov, oe): the larger probability, ties to the lower expert id.
__device__ __forceinline__ bool Beats(float v, int e, float ov, int oe) { return v > ov || (v == ov && e < oe); }

// The E ≤ 512 probabilities in registers (lane l holds experts l, l + 32, …): softmax over the
// experts in FP32, then k rounds of a warp argmax over each lane's best, ties to the lower id;
// only the round's winner rescans its own values. Weights are renormalized over the chosen. (The
// probabilities in shared memory, every lane rescanning its share each round, took ~10 µs a call
// at E = 512, k = 10.) The logits are read through L2 (they may have been written by this very
// kernel); `chosen` is k floats of scratch; idx and w receive k values each. Every lane of the
// warp must call it.
__device__ __forceinline__ void RouteToken(const __half* logits, int E, int k, float* chosen, int32_t* idx,
                                           __half* w) {
  const int lane = threadIdx.x % kWarp;
  float p[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = lane + kWarp * s;
    p[s] = e < E ? __half2float(__ldcg(logits + e)) : -INFINITY;
    mx = fmaxf(mx, p[s]);
  }
  mx = WarpMax(mx);
  float sum = 0;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) sum += (p[s] = expf(p[s] - mx));  // exp(-inf) = 0 past E
  sum = WarpSum(sum);
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) p[s] = lane + kWarp * s < E ? p[s] / sum : -1.0f;  // below every probability
  // This lane's best: scanning ascending ids keeps the first of equals.
  auto best = [&](float& v, int& e) {
    v = -2.0f;
    e = INT_MAX;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      if (p[s] > v) {
        v = p[s];
        e = lane + kWarp * s;
      }
    }
  };
  float v;
  int i;
  best(v, i);
  float top = 0;
  for (int j = 0; j < k; ++j) {
    float bv = v;
    int bi = i;
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (Beats(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    // Every lane now holds the same (bv, bi).
    top += bv;
    if (lane == 0) {
      idx[j] = bi;
      chosen[j] = bv;
    }
    if (bi % kWarp == lane) {
#pragma unroll
      for (int s = 0; s < kPerLane; ++s) {
        if (lane + kWarp * s == bi) p[s] = -1.0f;  // taken, like the padding
      }
      best(v, i);
    }
  }
  __syncwarp();
  for (int j = lane; j < k; j += kWarp) w[j] = __float2half(chosen[j] / top);
}

}  // namespace q38::cuda::moe_route
