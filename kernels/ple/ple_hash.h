// The PLE n-gram hash of qwen4_exp (docs/model.md §6.1–6.2): SplitMix64 multipliers, prime head
// table sizes and the rows each token reads. Everything here is exact integer arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "common/splitmix64.h"

namespace q38 {

struct PleHashParams {
  int64_t vocab_size;   // the padded model vocabulary
  int ngram_size;       // N
  int heads_per_ngram;
  int64_t vocab_base;   // ngram_vocab_size_base
  int64_t divisor;      // make_ngram_vocab_size_divisible_by
  uint64_t seed;
  int layer_index = 0;  // index of this PLE module among the model's PLE modules
};

struct PleHash {
  std::vector<int64_t> multipliers;  // [N]
  std::vector<int64_t> head_sizes;   // [(N-1)·heads_per_ngram]
  std::vector<int64_t> head_offsets;
  int64_t table_rows;                // Σ sizes padded up to a multiple of `divisor`
  int heads_per_ngram;

  static PleHash Derive(const PleHashParams& p);
  int heads() const { return static_cast<int>(head_sizes.size()); }
};

// The smallest prime strictly greater than n.
int64_t NextPrime(int64_t n);

// Global table rows [T, heads] for tokens ids[0..T), continuing a history of the previous
// N-1 tokens (history[0] the most recent, EOS-filled at sequence start). An EOS cuts the
// history of later tokens. history is updated to end with this call's tokens.
void NgramRows(const PleHash& hash, const int32_t* ids, int64_t T, int64_t eos,
               std::vector<int64_t>& history, int64_t* rows);

}  // namespace q38
