// Helpers shared by the op unit tests (kernels/*/*_test.cc): seeded random inputs, a closeness
// check scaled to the reference tensor, a check that no NaN is left in an output the test filled
// with NaN before the call, and the activations in double for naive references. Header-only;
// what is specific to one op (its naive reference, its constants) stays in that op's test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace q38::cpu::op_test {

// n floats drawn uniformly from [lo, hi) by a generator seeded with `seed`.
inline std::vector<float> Uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// n floats drawn from N(0, 1) by a generator seeded with `seed`.
inline std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// |got − want| ≤ rtol·(|want| + max|want|): relative, with the tensor's scale as the floor.
// `want` is the reference, in double or float.
template <typename W>
::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<W>& want,
                                    double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  double scale = 0;
  for (W w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= rtol * (std::fabs(static_cast<double>(want[i])) + scale))) {
      return ::testing::AssertionFailure() << "index " << i << ": got " << got[i] << ", want "
                                           << want[i] << " (err " << err << ", scale " << scale << ")";
    }
    worst = std::max(worst, err / (scale > 0 ? scale : 1));
  }
  return ::testing::AssertionSuccess() << "worst scaled error " << worst;
}

// Success when no element is NaN: outputs are filled with NaN before the op runs, so a NaN left
// means an element the op did not write (or one it computed as NaN).
inline ::testing::AssertionResult NoNan(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return ::testing::AssertionFailure() << "NaN left at " << i;
  }
  return ::testing::AssertionSuccess();
}

// The activations in double, for naive references.
inline double SiluD(double x) { return x / (1.0 + std::exp(-x)); }
inline double SigmoidD(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace q38::cpu::op_test
