// Causal depthwise convolution with SiLU on the GPU, carrying FP16 history, as kernels/conv/conv.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

// The history (K−1)·dilation may be at most this long.
constexpr int64_t kConvMaxHistory = 32;

void CausalConv(const __half* x, const __half* w, __half* state, __half* y, int64_t T, int64_t C, int64_t K,
                int64_t dilation, cudaStream_t stream);

}  // namespace q38::cuda
