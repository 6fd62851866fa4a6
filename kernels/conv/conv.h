// Causal depthwise convolution with SiLU, carrying its history across calls (GDN's conv with
// dilation 1, PLE's with dilation 3).
#pragma once

#include <cstdint>

namespace q38::cpu {

// x [T, C] (pre-activation inputs), w [C, K] (tap K-1 multiplies the current step),
// state [(K-1)·dilation, C] holds the previous inputs, oldest first, zeros at sequence start,
// and is updated to end with x. y [T, C] = silu(Σ_k w[c,k] · in[t − dilation·(K−1−k)][c]).
void CausalConv(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C,
                int64_t K, int64_t dilation);

}  // namespace q38::cpu
