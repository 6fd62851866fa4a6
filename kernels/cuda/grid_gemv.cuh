// Dense FP16 GEMV rows for the kernels with grid-wide barriers (hc_pre_grid_cuda.cu,
// moe_grid_cuda.cu, gdn_grid_cuda.cu): a warp takes rows r = first, first + stride, … of W (row r
// at r·pitch runs of 8 halves, K columns) against x, kRuns runs a lane in flight at once. The
// first batch of the first row can be issued early (Issue) and held in registers while the phase
// waits for x, so that a phase's loads go out before what it waits on.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/linear/linear_gemv.cuh"

namespace q38::cuda::grid_gemv {

template <int kRuns>
struct Batch {
  uint4 w[kRuns];
};

// Runs base + lane + 32·u of row `row` (-1: none, zeros).
template <int kRuns>
__device__ __forceinline__ void Issue(Batch<kRuns>& b, const __half* W, int64_t pitch, int64_t row, int runs,
                                      int base) {
  const int lane = threadIdx.x % kWarp;
  const uint4* p = reinterpret_cast<const uint4*>(W) + (row >= 0 ? row : 0) * pitch;
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int c = base + lane + kWarp * u;
    b.w[u] = row >= 0 && c < runs ? gemv::LoadStreamed(p + c) : make_uint4(0, 0, 0, 0);
  }
}

// The warp's rows, `pre` holding the first row's first batch (Issue(pre, W, pitch, first < N ?
// first : -1, K / 8, 0)); x(c) gives run c of x as 8 halves; done(r, sum) runs on every lane with
// row r's FP32 sum (each lane's runs in order, then a butterfly).
template <int kRuns, typename X, typename Done>
__device__ __forceinline__ void Rows(const __half* W, int64_t pitch, int N, int K, int first, int stride,
                                     Batch<kRuns>& pre, const X& x, const Done& done) {
  const int runs = K / 8, lane = threadIdx.x % kWarp;
  for (int r = first, preloaded = 1; r < N; r += stride, preloaded = 0) {
    float acc = 0;
    for (int base = 0; base < runs; base += kWarp * kRuns) {
      if (!(preloaded && base == 0)) Issue(pre, W, pitch, r, runs, base);
#pragma unroll
      for (int u = 0; u < kRuns; ++u) {
        const int c = base + lane + kWarp * u;
        if (c < runs) acc += Dot8Halves(pre.w[u], x(c));
      }
    }
    done(r, WarpSum(acc));
  }
}

}  // namespace q38::cuda::grid_gemv
