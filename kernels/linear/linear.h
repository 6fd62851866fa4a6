// Dense linear layer y = x·Wᵀ, the GEMV of decode and the GEMM of prefill.
#pragma once

#include <cstdint>

namespace q38::cpu {

// x [T, K], w [N, K] (PyTorch [out, in] layout), y [T, N]. Accumulates in double so the reference
// stays exact to float rounding whatever K is.
void Linear(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N);

// The same product for the fast CPU backend: FP32 accumulation in SIMD lanes (kernels/cpu_simd.h),
// within a few FP32 roundings of Linear. Row t of y starts at y + t·y_stride (≥ N), so a caller can
// fill a column range of a wider output.
void LinearFast(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N, int64_t y_stride);

}  // namespace q38::cpu
