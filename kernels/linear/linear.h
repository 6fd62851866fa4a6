// Dense linear layer y = x·Wᵀ, the GEMV of decode and the GEMM of prefill.
#pragma once

#include <cstdint>

namespace q38::cpu {

// x [T, K], w [N, K] (PyTorch [out, in] layout), y [T, N]. Accumulates in double so the reference
// stays exact to float rounding whatever K is.
void Linear(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N);

}  // namespace q38::cpu
