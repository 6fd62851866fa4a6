// RMSNorm variants of qwen4_exp (docs/model.md §4). All compute in FP32.
#pragma once

#include <cstdint>

namespace q38::cpu {

// Each row of x [rows, n] is split into groups of `group` elements, each normalized by its own
// RMS. The weight has either n entries or `group` entries (then it repeats per group, as q_norm
// does per head). zero_centred: scale by (1 + w) rather than w.
void RmsNorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, int64_t group,
             int64_t w_len, float eps, bool zero_centred);

// GDN output norm: per group of `group` elements, y = rmsnorm(o)·w · act(z), act = sigmoid or
// silu; w has `group` entries and is conventional (not zero-centred).
void GatedRmsNorm(const float* o, const float* z, const float* w, float* y, int64_t rows, int64_t n,
                  int64_t group, float eps, bool sigmoid_gate);

}  // namespace q38::cpu
