#include "client/stats.h"

#include <algorithm>
#include <cmath>

namespace q38::client {
namespace {

// `sorted` is ascending and not empty.
double SortedPercentile(const std::vector<double>& sorted, double p) {
  p = std::clamp(p, 0.0, 100.0);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return SortedPercentile(values, p);
}

Summary Summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : sorted) sum += v;
  s.count = sorted.size();
  s.mean = sum / static_cast<double>(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = SortedPercentile(sorted, 50);
  s.p90 = SortedPercentile(sorted, 90);
  s.p99 = SortedPercentile(sorted, 99);
  return s;
}

}  // namespace q38::client
