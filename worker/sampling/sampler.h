// Token sampling for the worker: greedy, temperature, top-k and top-p (Hugging Face / vLLM
// semantics, applied in that order), drawn with a counter-based RNG so that a request's seed
// alone fixes its tokens on every rank and every run.
//
// The exact procedure of SampleToken, for logits l[0..vocab) (FP32) and n = valid_vocab
// clamped to [1, vocab]:
//
//  0. Ids ≥ n are padding and are never returned (docs/model.md §10). A NaN logit counts as −inf.
//  1. temperature == 0: greedy. The id of the largest logit in [0, n); ties go to the lowest id.
//     top_k, top_p and seed are ignored. If every logit is −inf (or NaN) the result is 0.
//  2. Otherwise the candidates are the ids in [0, n) whose logit is not −inf; none → 0.
//  3. top-k (top_k > 0 and fewer than the candidates): keep the top_k candidates with the
//     largest logits; ties at the boundary keep the lower ids. (Dividing by a positive
//     temperature does not change this order, so it is taken on the raw logits.)
//  4. Weights, in double: m = the largest kept logit; w_i = exp((l_i − m) / temperature).
//     When m is +inf, w_i = 1 for the +inf logits and 0 for the rest (the limit).
//     W = Σ w_i over the kept ids, summed in ascending id order; p_i = w_i / W.
//  5. top-p (top_p < 1): order the kept ids by p descending, ties by id ascending; keep the
//     shortest prefix whose running sum of p (in that order) reaches top_p − kTopPSlack. The
//     slack absorbs FP32 rounding of top_p and of the logits, so that probabilities
//     .5, .3, .15, .05 with top_p = 0.8 keep exactly the first two. At least one id is kept.
//  6. Draw: u = CounterRng(seed).Uniform(step) ∈ [0, 1); W' = Σ w_i over the ids still kept,
//     summed in ascending id order; t = u · W' (renormalization without dividing). Walking the
//     kept ids in ascending id order with a running sum A of w_i, return the first id with
//     t < A (an id of weight 0 is never returned). If rounding leaves none, return the largest
//     kept id with w_i > 0.
//
// Every step is a pure function of (logits, n, params, step): no state, no threads, no
// dependence on the order of calls.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "common/splitmix64.h"

namespace q38 {

struct SamplingParams {
  float temperature = 0;  // 0 = greedy; otherwise finite and > 0
  int top_k = 0;          // 0 = no limit
  float top_p = 1;        // in (0, 1]; 1 = no limit
  uint64_t seed = 0;
};

// How far below top_p the running probability sum may stop (step 5 above).
inline constexpr double kTopPSlack = 1e-6;

// A counter-based uniform stream: the draw for counter `step` depends only on (seed, step).
class CounterRng {
 public:
  explicit CounterRng(uint64_t seed) : seed_(seed) {}

  // SplitMix64(seed ^ SplitMix64(step)).
  uint64_t Bits(uint64_t step) const;
  // (Bits(step) >> 11) · 2^-53: a multiple of 2^-53 in [0, 1).
  double Uniform(uint64_t step) const;

 private:
  uint64_t seed_;
};

// InvalidArgument naming the field: "temperature" (NaN, infinite or negative), "top_k"
// (negative), "top_p" (NaN or outside (0, 1]).
absl::Status ValidateSampling(const SamplingParams& p);

// One token from logits[0..vocab), by the procedure above. `step` is the index of the
// generated token within the request (0 for the first). `p` should pass ValidateSampling;
// values that do not are still handled without undefined behaviour: a temperature that is not
// > 0 (negative, NaN) is greedy, a negative top_k is no limit, a NaN top_p is no limit and a
// top_p ≤ 0 keeps one id. vocab must be ≥ 1 (otherwise 0 is returned).
int32_t SampleToken(const float* logits, int64_t vocab, int64_t valid_vocab, const SamplingParams& p,
                    uint64_t step);

}  // namespace q38
