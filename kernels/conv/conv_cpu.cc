#include "kernels/conv/conv.h"

#include <algorithm>
#include <vector>

#include "kernels/activation.h"

namespace q38::cpu {

void CausalConv(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C,
                int64_t K, int64_t dilation) {
  const int64_t hist = (K - 1) * dilation;
  // Timeline = history rows followed by this call's rows.
  std::vector<float> line((hist + T) * C);
  std::copy(state, state + hist * C, line.begin());
  std::copy(x, x + T * C, line.begin() + hist * C);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += static_cast<double>(w[c * K + k]) * line[(hist + t - dilation * (K - 1 - k)) * C + c];
      }
      y[t * C + c] = Silu(static_cast<float>(acc));
    }
  }
  std::copy(line.end() - hist * C, line.end(), state);
}

}  // namespace q38::cpu
