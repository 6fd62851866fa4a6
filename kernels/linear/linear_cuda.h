// Dense FP16 linear layer on the GPU: y[T,N] = x[T,K]·w[N,K]ᵀ with FP32 accumulation. Decode
// (few rows) streams the weights once through a GEMV; prefill tiles through WMMA tensor cores.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

// Rows at or below this count take the GEMV route; the manifest names the route.
constexpr int64_t kGemvMaxRows = 8;

void Linear(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream);

}  // namespace q38::cuda
