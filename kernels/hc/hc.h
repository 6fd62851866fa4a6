// Hyper-connections, the gated residual of qwen4_exp (docs/model.md §3, §5). The state X holds S
// streams of H values per token; Xn is its grouped zero-centred RMSNorm.
#pragma once

#include <cstdint>

namespace q38::cpu {

// X [T, S·H] = the embedding of each token copied into every stream.
void EmbedStreams(const float* table, const int32_t* ids, float* X, int64_t T, int64_t S, int64_t H);

// From the fused down|inject projection di [T, R + S] (just [T, R] without inject, as in the
// final mixer; S is still the stream count the gates divide by):
// a [T, R] = silu(di[:, :R] / S);  g [T, S] = 2·sigmoid(di[:, R:] / S).
void HcGates(const float* di, float* a, float* g, int64_t T, int64_t R, int64_t S, bool inject);

// h [T, H] = mean_s( sigmoid(m[t, s]) ⊙ Xn[t, s] ), m and Xn [T, S·H].
void HcCombine(const float* m, const float* xn, float* h, int64_t T, int64_t S, int64_t H);

// X[t, s] += g[t, s] · y[t]  (the residual update after a sub-block).
void HcResidual(float* X, const float* g, const float* y, int64_t T, int64_t S, int64_t H);

// A module's whole pre step (Backend::HcPre), plainly the composition of the references:
// xn = zero-centred RmsNorm of X by streams (norm [norm_len], norm_len = H or S·H);
// di = xn·down_injectᵀ ([R + S, S·H] with inject, else [R, S·H]); a, g = HcGates(di);
// m = a·upᵀ (up [S·H, R]); h [T, H] = HcCombine(m, xn). g is written only with inject.
void HcPre(const float* X, const float* norm, int64_t norm_len, const float* down_inject, const float* up, float* h,
           float* g, int64_t T, int64_t S, int64_t H, int64_t R, bool inject, float eps);

}  // namespace q38::cpu
