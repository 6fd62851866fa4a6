// One step of the prefill attention kernels' online softmax (attention_prefill_cuda.cu and the
// bench's v0 kernel).
#pragma once

#include <cuda_fp16.h>

#include <cmath>

namespace q38::cuda {

// A query row's scores for this step lie with an aligned group of 8 lanes, kN a lane (−∞ where
// masked); the whole warp calls this. Each lane writes exp(score − m_new) rounded to FP16 to
// p[0..kN), m_new being the larger of the running maximum m and this step's; the group's first
// lane then sets corr = exp(m − m_new) (0 on the first step, m = −∞), l = l·corr + the sum of
// the rounded probabilities (the normalizer sums what P·V multiplies) and m = m_new.
template <int kN>
__device__ __forceinline__ void OnlineSoftmaxStep(const float (&sc)[kN], __half* p, float& m, float& l, float& corr,
                                                  bool first_lane) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kN; ++j) mx = fmaxf(mx, sc[j]);
  for (int x = 1; x < 8; x <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
  const float m_old = m, m_new = fmaxf(m_old, mx);
  float sum = 0;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const __half h = __float2half(sc[j] == -INFINITY ? 0.0f : __expf(sc[j] - m_new));
    p[j] = h;
    sum += __half2float(h);
  }
  for (int x = 1; x < 8; x <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
  __syncwarp();  // every lane has read m before it changes
  if (first_lane) {
    corr = __expf(m_old - m_new);
    l = l * corr + sum;
    m = m_new;
  }
}

}  // namespace q38::cuda
