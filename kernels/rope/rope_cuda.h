// Partial NeoX RoPE on the GPU, in place on FP16, as kernels/rope/rope.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void Rope(__half* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          double theta, cudaStream_t stream);

// Per head of x [T, heads, head_dim] in place: the zero-centred RMSNorm with w [head_dim] (as
// RmsNorm rounds it), then the rotation, in one kernel (kernels/backend.h, NormRope); with a cache
// [positions, heads, head_dim], the rows are also written at their positions.
void NormRope(__half* x, const __half* w, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
              int64_t rotary_dim, double theta, float eps, __half* cache, cudaStream_t stream);

}  // namespace q38::cuda
