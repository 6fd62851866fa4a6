// Partial rotary position embedding, NeoX (half-split) pairing, over the first `rotary_dim`
// dims of every head (docs/model.md §8.1).
#pragma once

#include <cstdint>

namespace q38::cpu {

// x [T, heads, head_dim] in place; positions [T].
void Rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
          int64_t rotary_dim, double theta);

// The inverse frequencies exactly as the reference computes them in FP32:
// 1 / theta^(2i / rotary_dim), i < rotary_dim / 2.
float RopeInvFreq(int64_t i, int64_t rotary_dim, double theta);

}  // namespace q38::cpu
