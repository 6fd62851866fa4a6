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
// HcResidual, then the zero-centred RmsNorm of X by rows of H into xn [T, S·H] (norm of H, or of
// S·H: a row per stream), in one kernel with the two's bits (Backend::HcResidualNorm). Needs
// HcResidualNormFits: H a multiple of 8 and 16-byte aligned X, y, norm and xn.
bool HcResidualNormFits(int64_t S, int64_t H, int64_t norm_len, const void* X, const void* y, const void* norm,
                        const void* xn);
void HcResidualNorm(float* X, const __half* g, const __half* y, const __half* norm, int64_t norm_len, __half* xn,
                    int64_t T, int64_t S, int64_t H, float eps, cudaStream_t stream);

// The pre step of one module for one token (Backend::HcPre at T = 1) in two kernels instead of
// five (norm, down/inject GEMV, gates, up GEMV, combine):
//  1. the norm around the down/inject GEMV, split by streams: block (`down_rows` rows of
//     down_inject, stream s) takes the stream's H columns, each thread a fixed slice of them for
//     all its rows. A thread issues all its weight loads first, then reads its slice of X and of
//     the norm weights once into registers; the stream's sum of squares meets in shared memory,
//     xn = X·rstd·(1 + norm) is rounded to FP16 in registers and dotted with the rows, and the
//     block writes its part of each row's sum to parts [S, N] (F32); block (0, s) writes rstd[s];
//  2. the gates, the up GEMV and the combine: every block adds each row's S parts in stream order
//     into di (FP16) and makes a = silu(di[:R] / S) in shared memory, block 0 also g =
//     2·sigmoid(di[R:] / S); a lane group of `up_lanes` a row of up reads its R weights against a,
//     the S rows of one column meet in shared memory as sigmoid(m)·xn (xn again from X and rstd),
//     h = their mean in stream order.
// Rounds where the composition rounds (xn, di, a, m, h to FP16); sums in a fixed order that
// depends on the shape and the configuration alone. Needs HcPreFusedFits (H ≤ 12,288, R ≤ 24,576).
// The last sub-block's residual update X += g·y (g [S], y [H] FP16, y 16-byte aligned), made by
// the fused pre step on its way (Backend::HcResidualPre): kernel 1 works on X + g·y, kernel 2
// also stores it into X, the same bits as HcResidual gives. None where g is null; g must not be
// the step's new gates, which kernel 2 writes while every block reads these.
struct HcLastResidual {
  const __half* g = nullptr;
  const __half* y = nullptr;
};
struct HcPreConfig {
  int down_rows = 4;  // rows of down_inject a block of the first kernel: 1, 2 or 4
  int up_lanes = 16;  // lanes a row of up in the second kernel: 8 or 16
};
// The configuration HcPreFused uses for a shape.
HcPreConfig HcPreChoose(int64_t S, int64_t H, int64_t R);
bool HcPreFusedFits(int64_t S, int64_t H, int64_t R, int64_t norm_len, const void* X, const void* norm,
                    const void* down_inject, const void* up);
// parts: scratch of HcPreScratchFloats floats; rstd: S floats. X is written only with a last
// residual.
int64_t HcPreScratchFloats(int64_t S, int64_t R, bool inject);
void HcPreFused(float* X, const __half* norm, int64_t norm_len, const __half* down_inject, const __half* up, __half* h,
                __half* g, float* parts, float* rstd, int64_t S, int64_t H, int64_t R, bool inject, float eps,
                cudaStream_t stream, HcLastResidual last = {});
// The same with a given configuration (tests and hc_bench), and its two kernels alone (hc_bench
// times them apart: parts and rstd are kernel 1's outputs, kernel 2's inputs).
void HcPreFused(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* down_inject,
                const __half* up, __half* h, __half* g, float* parts, float* rstd, int64_t S, int64_t H, int64_t R,
                bool inject, float eps, cudaStream_t stream, HcLastResidual last = {});
void HcPreFusedDown(const HcPreConfig& config, const float* X, const __half* norm, int64_t norm_len,
                    const __half* down_inject, float* parts, float* rstd, int64_t S, int64_t H, int64_t R, bool inject,
                    float eps, cudaStream_t stream, HcLastResidual last = {});
void HcPreFusedUp(const HcPreConfig& config, float* X, const __half* norm, int64_t norm_len, const __half* up,
                  const float* parts, __half* g, const float* rstd, __half* h, int64_t S, int64_t H, int64_t R,
                  bool inject, cudaStream_t stream, HcLastResidual last = {});

}  // namespace q38::cuda
