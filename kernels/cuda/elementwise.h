// Small elementwise kernels the backend needs between ops: fills, residual adds, gating, and the
// position-addressed cache writes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void FillHalf(__half* x, float value, int64_t n, cudaStream_t stream);
void FillFloat(float* x, float value, int64_t n, cudaStream_t stream);
// Backend::FillRandom, by the destination's element type.
enum class RandomKind { kHalf, kFloat, kByte, kScaleByte };
void FillRandom(void* x, RandomKind kind, uint64_t seed, float spread, int64_t n, cudaStream_t stream);
void Add(__half* x, const __half* y, int64_t n, cudaStream_t stream);
void Add(float* x, const __half* y, int64_t n, cudaStream_t stream);  // into the FP32 residual streams
void SigmoidMul(__half* x, const __half* gate, int64_t n, cudaStream_t stream);
// cache row positions[t] ← src row t, rows of `row_bytes` (a multiple of 2).
void WriteRows(const void* src, void* cache, const int64_t* positions, int64_t T, int64_t row_bytes,
               cudaStream_t stream);

}  // namespace q38::cuda
