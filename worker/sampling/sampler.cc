#include "worker/sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace q38 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// A NaN never compares greater, so it never wins; with nothing above −inf the result is 0.
int32_t Greedy(const float* logits, int64_t n) {
  int64_t best = 0;
  float best_value = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] > best_value) {  // strict: ties keep the lower id
      best = i;
      best_value = logits[i];
    }
  }
  return static_cast<int32_t>(best);
}

// Top-k order key: larger = more likely (larger logit, then lower id), one integer compare.
// `logit` is not NaN.
inline uint64_t LogitKey(float logit, int32_t id) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // monotone in logit
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint64_t>(~static_cast<uint32_t>(id));
}

// Keeps the k ids of `ids` with the largest logits, ties to the lower ids; returns them ascending.
std::vector<int32_t> TopK(const float* logits, const std::vector<int32_t>& ids, int64_t k) {
  std::vector<uint64_t> keys;
  keys.reserve(ids.size());
  for (int32_t id : ids) keys.push_back(LogitKey(logits[id], id));
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<uint64_t>());
  std::vector<int32_t> kept;
  kept.reserve(k);
  for (int64_t i = 0; i < k; ++i) kept.push_back(static_cast<int32_t>(~static_cast<uint32_t>(keys[i])));
  std::sort(kept.begin(), kept.end());
  return kept;
}

// Top-p order on (weight, id): larger weight first, then lower id. Weights are finite and ≥ 0,
// so their bit patterns order like their values.
struct Weighted {
  uint64_t weight_bits;
  int32_t id;
  double weight;
};
inline bool MoreLikely(const Weighted& a, const Weighted& b) {
  if (a.weight_bits != b.weight_bits) return a.weight_bits > b.weight_bits;
  return a.id < b.id;
}

// Weights lie in [0, 1]: the top 16 bits (exponent and 4 mantissa bits, 1/16 of an octave per
// bucket) give at most 0x3FF0 + 1 buckets, monotone in the weight.
constexpr uint64_t kTopBucket = 0x3FF0;
inline uint64_t Bucket(uint64_t weight_bits) { return std::min(weight_bits >> 48, kTopBucket); }

// The nucleus of the ids with weights w (parallel to ids, ids ascending, total W > 0): the
// shortest prefix in MoreLikely order whose running sum of w/W, taken in that order, reaches
// threshold. Returns the kept ids ascending.
//
// Only a head of the order is sorted. A histogram of w by Bucket finds the highest buckets
// whose share passes the threshold by a margin far above rounding; the ids in them are a
// prefix of the order (the bucket is monotone in w, and equal weights share a bucket) that
// holds the answer, so sorting and scanning just them gives exactly what a full sort would.
std::vector<int32_t> TopP(const std::vector<int32_t>& ids, const std::vector<double>& w, double W,
                          double threshold) {
  constexpr double kGuard = 1e-9;
  constexpr size_t kSortAllBelow = 2048;  // small sets: sorting them all beats the histogram
  uint64_t lowest = 0;
  if (ids.size() >= kSortAllBelow) {
    std::vector<double> share(kTopBucket + 1, 0.0);
    for (size_t i = 0; i < ids.size(); ++i) share[Bucket(std::bit_cast<uint64_t>(w[i]))] += w[i];
    double acc = 0;
    for (uint64_t b = kTopBucket + 1; b-- > 0;) {
      acc += share[b] / W;
      if (acc >= threshold + kGuard) {
        lowest = b;
        break;
      }
    }
  }
  for (;;) {
    std::vector<Weighted> head;
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t bits = std::bit_cast<uint64_t>(w[i]);
      if (Bucket(bits) >= lowest) head.push_back({bits, ids[i], w[i]});
    }
    std::sort(head.begin(), head.end(), [](const Weighted& a, const Weighted& b) { return MoreLikely(a, b); });
    size_t keep = 0;
    double running = 0;
    for (size_t i = 0; i < head.size(); ++i) {
      running += head[i].weight / W;
      if (running >= threshold) {
        keep = i + 1;
        break;
      }
    }
    if (keep == 0) {
      if (lowest > 0) {  // not reached within the head (cannot happen past the guard): widen
        lowest = 0;
        continue;
      }
      keep = head.size();  // rounding kept the whole sum below the threshold: keep everything
    }
    std::vector<int32_t> kept;
    kept.reserve(keep);
    for (size_t i = 0; i < keep; ++i) kept.push_back(head[i].id);
    std::sort(kept.begin(), kept.end());
    return kept;
  }
}

}  // namespace

uint64_t CounterRng::Bits(uint64_t step) const { return SplitMix64(seed_ ^ SplitMix64(step)); }

double CounterRng::Uniform(uint64_t step) const {
  return static_cast<double>(Bits(step) >> 11) * 0x1.0p-53;
}

absl::Status ValidateSampling(const SamplingParams& p) {
  if (!(std::isfinite(p.temperature) && p.temperature >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0 (0 = greedy), got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0 (0 = no limit), got ", p.top_k));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  return absl::OkStatus();
}

int32_t SampleToken(const float* logits, int64_t vocab, int64_t valid_vocab, const SamplingParams& p,
                    uint64_t step) {
  if (vocab < 1 || logits == nullptr) return 0;
  const int64_t n = std::clamp<int64_t>(valid_vocab, 1, vocab);

  // 1. Greedy (also for a temperature that is not > 0, e.g. negative or NaN).
  if (!(p.temperature > 0)) return Greedy(logits, n);

  // 2. Candidates: ids in [0, n) with a logit above −inf.
  std::vector<int32_t> ids;
  ids.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] > kNegInf) ids.push_back(static_cast<int32_t>(i));  // false for NaN
  }
  if (ids.empty()) return 0;

  // 3. top-k.
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids = TopK(logits, ids, p.top_k);

  // 4. Weights relative to the largest kept logit, in double.
  float max_logit = kNegInf;
  for (int32_t id : ids) max_logit = std::max(max_logit, logits[id]);
  const double temperature = p.temperature;
  std::vector<double> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float l = logits[ids[i]];
    if (max_logit == kPosInf) {
      w[i] = l == kPosInf ? 1.0 : 0.0;
    } else {
      // Below −746, exp is 0 in double (under half the smallest subnormal); skipping the call
      // gives the same value without libm's slow underflow path.
      const double d = (static_cast<double>(l) - static_cast<double>(max_logit)) / temperature;
      w[i] = d < -746.0 ? 0.0 : std::exp(d);
    }
  }
  double W = 0;
  for (double x : w) W += x;  // ascending id order; W ≥ 1 (the max has weight 1)

  // 5. top-p.
  if (p.top_p < 1 && ids.size() > 1) {
    std::vector<int32_t> kept = TopP(ids, w, W, static_cast<double>(p.top_p) - kTopPSlack);
    if (kept.size() < ids.size()) {
      // Restrict w to the kept ids (both lists ascending) and re-sum in ascending id order.
      std::vector<double> kept_w;
      kept_w.reserve(kept.size());
      size_t j = 0;
      for (size_t i = 0; i < ids.size() && j < kept.size(); ++i) {
        if (ids[i] == kept[j]) {
          kept_w.push_back(w[i]);
          ++j;
        }
      }
      ids = std::move(kept);
      w = std::move(kept_w);
      W = 0;
      for (double x : w) W += x;
    }
  }

  // 6. Inverse CDF over the kept ids in ascending id order.
  const double target = CounterRng(p.seed).Uniform(step) * W;
  double acc = 0;
  int32_t last_positive = ids.front();
  for (size_t i = 0; i < ids.size(); ++i) {
    acc += w[i];
    if (w[i] > 0) last_positive = ids[i];
    if (target < acc) return ids[i];
  }
  return last_positive;
}

}  // namespace q38
