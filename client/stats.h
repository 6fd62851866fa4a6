// Order statistics for client-side latency measurements: percentiles by linear interpolation
// between closest ranks (the "linear" method of numpy.percentile) and a summary of one series.
#pragma once

#include <cstddef>
#include <vector>

namespace q38::client {

// The p-th percentile (p in [0, 100], clamped) of `values`, which need not be sorted. An empty
// series has no percentile; 0 is returned for it, and callers report `count` alongside.
double Percentile(std::vector<double> values, double p);

struct Summary {
  size_t count = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};

// Every field is 0 for an empty series.
Summary Summarize(const std::vector<double>& values);

}  // namespace q38::client
