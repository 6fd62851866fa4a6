#include "tools/checkpoint/nvfp4_quantize.h"

#include <algorithm>
#include <cmath>

#include "common/dtype.h"

namespace q38 {

float Nvfp4Global(float amax) { return amax > 0 ? amax / (6.0f * 448.0f) : 1.0f; }

Nvfp4Weight QuantizeNvfp4(const float* w, int64_t N, int64_t K, float global) {
  Nvfp4Weight q;
  q.global = global;
  q.codes.assign(N * K / 2, 0);
  q.scales.assign(N * K / 16, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < K / 16; ++b) {
      const float* x = w + n * K + b * 16;
      float amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(x[j]));
      const uint8_t scale = FloatToE4m3(amax / (6.0f * global));
      q.scales[n * (K / 16) + b] = scale;
      const float step = E4m3ToFloat(scale) * global;
      if (step == 0) continue;  // the block is zero, or too small for any E4M3 scale: codes stay 0
      for (int j = 0; j < 16; ++j) {
        const uint8_t code = FloatToE2m1(x[j] / step);
        const int64_t k = b * 16 + j;
        q.codes[(n * K + k) / 2] |= static_cast<uint8_t>(k % 2 == 0 ? code : code << 4);
      }
    }
  }
  return q;
}

}  // namespace q38
