#include "kernels/logits/logits.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace q38::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Larger = ranks first: larger value, then lower index; one integer compare. `value` is not NaN.
uint64_t RankKey(float value, int64_t index) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // monotone in value
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint64_t>(~static_cast<uint32_t>(index));
}

// exp(x − m), with the +inf limit (x = m = +inf counts 1).
double Weight(double x, double m) { return x == m ? 1.0 : std::exp(x - m); }

}  // namespace

void ArgMax(const float* x, int64_t valid, float* out) {
  float best = kNegInf;
  int64_t id = -1;
  for (int64_t i = 0; i < valid; ++i) {
    if (x[i] > best) {  // strict: ties keep the lower index; false for NaN
      best = x[i];
      id = i;
    }
  }
  out[0] = best;
  out[1] = static_cast<float>(id);
}

void TopLogits(const float* x, int64_t valid, int64_t k, float* out) {
  std::vector<uint64_t> keys;
  keys.reserve(valid);
  for (int64_t i = 0; i < valid; ++i) {
    if (x[i] > kNegInf) keys.push_back(RankKey(x[i], i));  // false for NaN
  }
  const int64_t kept = std::min<int64_t>(k, static_cast<int64_t>(keys.size()));
  std::partial_sort(keys.begin(), keys.begin() + kept, keys.end(), std::greater<uint64_t>());
  for (int64_t j = 0; j < k; ++j) {
    const int64_t index = j < kept ? static_cast<int64_t>(~static_cast<uint32_t>(keys[j])) : -1;
    out[j] = index < 0 ? kNegInf : x[index];
    out[k + j] = static_cast<float>(index);
  }
  const double m = kept > 0 ? out[0] : kNegInf;
  double s = 0;
  for (int64_t i = 0; i < valid; ++i) {
    if (x[i] > kNegInf) s += Weight(x[i], m);
  }
  out[2 * k] = static_cast<float>(m);
  out[2 * k + 1] = static_cast<float>(s);
}

LogitsSummary MergeTopLogits(const float* parts, int64_t world, int64_t k, int64_t shard) {
  const int64_t stride = 2 * k + 2;
  double m = kNegInf;
  for (int64_t r = 0; r < world; ++r) m = std::max<double>(m, parts[r * stride + 2 * k]);
  LogitsSummary summary;
  std::vector<std::pair<uint64_t, std::pair<int32_t, float>>> candidates;
  double s = 0;
  for (int64_t r = 0; r < world; ++r) {
    const float* p = parts + r * stride;
    if (p[2 * k + 1] > 0) s += static_cast<double>(p[2 * k + 1]) * Weight(p[2 * k], m);
    for (int64_t j = 0; j < k && p[k + j] >= 0; ++j) {
      const int64_t id = r * shard + static_cast<int64_t>(p[k + j]);
      candidates.push_back({RankKey(p[j], id), {static_cast<int32_t>(id), p[j]}});
    }
  }
  const size_t kept = std::min<size_t>(k, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + kept, candidates.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t j = 0; j < kept; ++j) summary.top.push_back(candidates[j].second);
  summary.log_sum_exp = s > 0 ? m + std::log(s) : kNegInf;
  return summary;
}

}  // namespace q38::cpu
