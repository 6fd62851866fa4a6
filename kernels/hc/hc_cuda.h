// Hyper-connection steps on the GPU (MODEL.md §5), as kernels/hc/hc.h. The residual streams X
// are FP32: they take 2 updates per layer, and FP16 would round every one of them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void EmbedStreams(const __half* table, const int32_t* ids, float* X, int64_t T, int64_t S, int64_t H,
                  cudaStream_t stream);
// di [T, R + S] with inject, [T, R] without.
void HcGates(const __half* di, __half* a, __half* g, int64_t T, int64_t R, int64_t S, bool inject, cudaStream_t stream);
void HcCombine(const __half* m, const __half* xn, __half* h, int64_t T, int64_t S, int64_t H, cudaStream_t stream);
void HcResidual(float* X, const __half* g, const __half* y, int64_t T, int64_t S, int64_t H, cudaStream_t stream);

}  // namespace q38::cuda
