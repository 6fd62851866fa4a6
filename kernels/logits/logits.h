// Logits reductions for decoding without the logits leaving the device (docs/design.md §3: lm_head is
// split by vocabulary, each rank reduces its part and the ranks merge the results).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace q38::cpu {

// out[0] = the largest of x[0, valid), out[1] = its index; compared as FP32, a NaN never wins, ties
// go to the lowest index (worker/sampling/sampler.h, greedy). Nothing above −inf: (−inf, −1).
void ArgMax(const float* x, int64_t valid, float* out);

// The most alternatives a logprobs request may ask for (OpenAI's bound).
inline constexpr int64_t kMaxTopLogits = 20;

// What log probabilities need of one rank's logits x[0, valid), in out[2k + 2]:
//   out[0, k)       the k largest values, largest first, ties to the lower index (ArgMax's order);
//   out[k, 2k)      their indices as floats; slots past the values above −inf hold (−inf, −1);
//   out[2k]         m, the largest value (−inf when none is above −inf);
//   out[2k + 1]     s = Σ exp(x_i − m) over the values above −inf (0 when none; a +inf value counts
//                   1 and the rest 0, the limit).
// NaN and −inf values are never taken. 1 ≤ k ≤ kMaxTopLogits.
void TopLogits(const float* x, int64_t valid, int64_t k, float* out);

// Rank-local TopLogits outputs merged: parts[world][2k + 2], rank r holding ids [r·shard, (r+1)·shard).
struct LogitsSummary {
  std::vector<std::pair<int32_t, float>> top;  // (id, logit), the k most likely over all ranks
  double log_sum_exp = 0;                      // log Σ exp(logit) over every valid id
};
LogitsSummary MergeTopLogits(const float* parts, int64_t world, int64_t k, int64_t shard);

}  // namespace q38::cpu
