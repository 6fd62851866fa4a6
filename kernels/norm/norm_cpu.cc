#include "kernels/norm/norm.h"

#include <cmath>

#include "kernels/activation.h"

namespace q38::cpu {
namespace {

float InvRms(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
}

}  // namespace

void RmsNorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, int64_t group,
             int64_t w_len, float eps, bool zero_centred) {
  const float offset = zero_centred ? 1.0f : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      const float* xg = x + r * n + g0;
      float* yg = y + r * n + g0;
      const float inv = InvRms(xg, group, eps);
      for (int64_t i = 0; i < group; ++i) yg[i] = xg[i] * inv * (offset + w[(g0 + i) % w_len]);
    }
  }
}

void GatedRmsNorm(const float* o, const float* z, const float* w, float* y, int64_t rows, int64_t n,
                  int64_t group, float eps, bool sigmoid_gate) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      const int64_t base = r * n + g0;
      const float inv = InvRms(o + base, group, eps);
      for (int64_t i = 0; i < group; ++i) {
        const float gate = sigmoid_gate ? Sigmoid(z[base + i]) : Silu(z[base + i]);
        y[base + i] = o[base + i] * inv * w[i] * gate;
      }
    }
  }
}

}  // namespace q38::cpu
