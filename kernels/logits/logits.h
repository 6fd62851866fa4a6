// Logits reductions for decoding without the logits leaving the device (docs/design.md §3: lm_head is
// split by vocabulary, each rank reduces its part and the ranks merge the results).
#pragma once

#include <cstdint>

namespace q38::cpu {

// out[0] = the largest of x[0, valid), out[1] = its index; compared as FP32, a NaN never wins, ties
// go to the lowest index (worker/sampling/sampler.h, greedy). Nothing above −inf: (−inf, −1).
void ArgMax(const float* x, int64_t valid, float* out);

}  // namespace q38::cpu
