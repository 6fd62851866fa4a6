// What the lab benches (kernels/*/*_bench.cu) check and print beside a time: how far a result lies
// from its reference, and the cells of a bandwidth row.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/testing/bench_timing.h"

namespace q38::bench {

// The largest |got − want| relative to want's largest magnitude; infinite where got is not finite.
inline double RelativeGap(const std::vector<float>& got, const std::vector<float>& want) {
  double gap = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    gap = std::max(gap, std::isfinite(got[i]) ? std::fabs(static_cast<double>(got[i]) - want[i]) : INFINITY);
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return gap / std::max(scale, 1e-30);
}

// The largest |got − want| in units of the gap allowed at each value, rtol·|want| + atol: at most
// 1 passes; infinite where got is not finite.
inline double GapOfAllowed(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double gap = std::fabs(static_cast<double>(got[i]) - want[i]) / (rtol * std::fabs(want[i]) + atol);
    worst = std::isfinite(gap) ? std::max(worst, gap) : INFINITY;
  }
  return worst;
}

// "µs in a graph (eager) | MB | GB/s | share of the stream read", the cells of a bandwidth row.
inline std::string RateCells(const Timing& graph, const Timing& eager, double bytes, double stream_gbs) {
  const double gbs = bytes / (graph.median_us * 1e3);
  return absl::StrFormat("%.2f (%.2f) | %.3f | %.0f | %.1f%%", graph.median_us, eager.median_us, bytes / 1e6, gbs,
                         100 * gbs / stream_gbs);
}

}  // namespace q38::bench
