// RMSNorm variants on the GPU (FP16 in and out, FP32 statistics), as kernels/norm/norm.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

// y may alias x.
void RmsNorm(const __half* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
             float eps, bool zero_centred, cudaStream_t stream);
// The same from the FP32 residual streams.
void RmsNorm(const float* x, const __half* w, __half* y, int64_t rows, int64_t n, int64_t group, int64_t w_len,
             float eps, bool zero_centred, cudaStream_t stream);
void GatedRmsNorm(const __half* o, const __half* z, const __half* w, __half* y, int64_t rows, int64_t n,
                  int64_t group, float eps, bool sigmoid_gate, cudaStream_t stream);

}  // namespace q38::cuda
