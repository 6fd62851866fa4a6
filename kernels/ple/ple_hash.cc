#include "kernels/ple/ple_hash.h"

#include <limits>

namespace q38 {
namespace {

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

}  // namespace

int64_t NextPrime(int64_t n) {
  int64_t c = n + 1;
  while (!IsPrime(c)) ++c;
  return c;
}

PleHash PleHash::Derive(const PleHashParams& p) {
  PleHash h;
  h.heads_per_ngram = p.heads_per_ngram;
  const int64_t multiplier_max = std::numeric_limits<int64_t>::max() / p.vocab_size;
  const uint64_t half_bound = static_cast<uint64_t>(multiplier_max / 2);
  const uint64_t base_seed = p.seed + 10007ull * static_cast<uint64_t>(p.layer_index);
  for (int j = 0; j < p.ngram_size; ++j) {
    const uint64_t mixed = SplitMix64(base_seed + kSplitMix64Gamma * static_cast<uint64_t>(j + 1));
    h.multipliers.push_back(static_cast<int64_t>(2 * (mixed % half_bound) + 1));
  }
  // Head g takes the (g+1)-th prime above base−1, counting over all PLE modules' heads.
  const int heads = (p.ngram_size - 1) * p.heads_per_ngram;
  int64_t prime = p.vocab_base - 1;
  for (int g = 0; g < p.layer_index * heads; ++g) prime = NextPrime(prime);
  int64_t offset = 0;
  for (int g = 0; g < heads; ++g) {
    prime = NextPrime(prime);
    h.head_sizes.push_back(prime);
    h.head_offsets.push_back(offset);
    offset += prime;
  }
  h.table_rows = (offset + p.divisor - 1) / p.divisor * p.divisor;
  return h;
}

void NgramRows(const PleHash& hash, const int32_t* ids, int64_t T, int64_t eos,
               std::vector<int64_t>& history, int64_t* rows) {
  const int n = static_cast<int>(hash.multipliers.size());
  std::vector<int64_t> u(n);
  for (int64_t t = 0; t < T; ++t) {
    u[0] = ids[t];
    // u_s is the token s back, unless an EOS lies strictly between it and the current token.
    bool cut = false;
    for (int s = 1; s < n; ++s) {
      u[s] = cut ? eos : history[s - 1];
      if (u[s] == eos) cut = true;
      if (cut) u[s] = eos;
    }
    int64_t hv = 0;
    const int per = hash.heads_per_ngram;
    for (int s = 0; s < n; ++s) {
      hv ^= u[s] * hash.multipliers[s];  // never overflows: ids < vocab, m < INT64_MAX / vocab
      if (s == 0) continue;
      for (int h = 0; h < per; ++h) {
        const int head = (s - 1) * per + h;
        rows[t * hash.heads() + head] = hv % hash.head_sizes[head] + hash.head_offsets[head];
      }
    }
    for (int s = n - 2; s > 0; --s) history[s] = history[s - 1];
    history[0] = ids[t];
  }
}

}  // namespace q38
