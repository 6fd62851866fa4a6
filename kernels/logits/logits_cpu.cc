#include "kernels/logits/logits.h"

#include <limits>

namespace q38::cpu {

void ArgMax(const float* x, int64_t valid, float* out) {
  float best = -std::numeric_limits<float>::infinity();
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

}  // namespace q38::cpu
