// Hyper-connection steps on the GPU (docs/model.md §5), as kernels/hc/hc.h. The residual streams X
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

// The pre step of one module for one token (Backend::HcPre at T = 1) in two kernels instead of
// five (norm, down/inject GEMV, gates, up GEMV, combine):
//  1. the norm inside the down/inject GEMV: every block reduces X's per-stream sums of squares
//     itself (X is 40 KB at full size, read from L2) while its first weight loads are in flight,
//     writes xn = X·rstd·(1 + norm) as FP16 into shared memory, and reads its rows against it;
//     di [rows] (FP16, as the composition rounds it) and rstd [S] (F32) go to scratch;
//  2. the gates, the up GEMV and the combine: every block computes a = silu(di[:R] / S) into
//     shared memory, a lane group of 8 per row of up reads its R weights against it, the S rows of
//     one column meet in shared memory as sigmoid(m)·xn (xn again from X and rstd), h = their
//     mean in stream order; block 0 writes g = 2·sigmoid(di[R:] / S).
// Rounds where the composition rounds (xn, di, a, m, h to FP16); sums in a fixed order.
// Needs HcPreFusedFits.
bool HcPreFusedFits(int64_t S, int64_t H, int64_t R, int64_t norm_len, const void* X, const void* norm,
                    const void* down_inject, const void* up);
void HcPreFused(const float* X, const __half* norm, int64_t norm_len, const __half* down_inject, const __half* up,
                __half* h, __half* g, __half* di, float* rstd, int64_t S, int64_t H, int64_t R, bool inject, float eps,
                cudaStream_t stream);

}  // namespace q38::cuda
