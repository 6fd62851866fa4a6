#include "kernels/rope/rope.h"

#include <cmath>

namespace q38::cpu {

float RopeInvFreq(int64_t i, int64_t rotary_dim, double theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  return 1.0f / std::pow(static_cast<float>(theta), exponent);
}

void Rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
          int64_t rotary_dim, double theta) {
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // The angle is an FP32 product, as in the reference; cos/sin of it in FP32.
      const float angle = static_cast<float>(positions[t]) * RopeInvFreq(i, rotary_dim, theta);
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace q38::cpu
