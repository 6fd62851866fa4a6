#include "kernels/linear/linear.h"

namespace q38::cpu {

void Linear(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * K;
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = w + n * K;
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xr[k]) * wr[k];
      y[t * N + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace q38::cpu
