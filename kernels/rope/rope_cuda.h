// Partial NeoX RoPE on the GPU, in place on FP16, as kernels/rope/rope.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void Rope(__half* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          double theta, cudaStream_t stream);

}  // namespace q38::cuda
