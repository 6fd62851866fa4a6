#include "kernels/hc/hc.h"

#include <algorithm>
#include <vector>

#include "kernels/activation.h"
#include "kernels/linear/linear.h"
#include "kernels/norm/norm.h"

namespace q38::cpu {

void EmbedStreams(const float* table, const int32_t* ids, float* X, int64_t T, int64_t S, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < S; ++s) std::copy(table + ids[t] * H, table + (ids[t] + 1) * H, X + (t * S + s) * H);
  }
}

void HcGates(const float* di, float* a, float* g, int64_t T, int64_t R, int64_t S, bool inject) {
  const int64_t width = R + (inject ? S : 0);
  const float inv_s = 1.0f / static_cast<float>(S);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < R; ++r) a[t * R + r] = Silu(di[t * width + r] * inv_s);
    if (!inject) continue;
    for (int64_t s = 0; s < S; ++s) g[t * S + s] = 2.0f * Sigmoid(di[t * width + R + s] * inv_s);
  }
}

void HcCombine(const float* m, const float* xn, float* h, int64_t T, int64_t S, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < H; ++c) {
      double acc = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (t * S + s) * H + c;
        acc += Sigmoid(m[i]) * xn[i];
      }
      h[t * H + c] = static_cast<float>(acc / S);
    }
  }
}

void HcResidual(float* X, const float* g, const float* y, int64_t T, int64_t S, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t c = 0; c < H; ++c) X[(t * S + s) * H + c] += g[t * S + s] * y[t * H + c];
    }
  }
}

void HcPre(const float* X, const float* norm, int64_t norm_len, const float* down_inject, const float* up, float* h,
           float* g, int64_t T, int64_t S, int64_t H, int64_t R, bool inject, float eps) {
  const int64_t W = S * H, rows = R + (inject ? S : 0);
  std::vector<float> xn(T * W), di(T * rows), a(T * R), m(T * W);
  RmsNorm(X, norm, xn.data(), T, W, H, norm_len, eps, /*zero_centred=*/true);
  Linear(xn.data(), down_inject, di.data(), T, W, rows);
  HcGates(di.data(), a.data(), g, T, R, S, inject);
  Linear(a.data(), up, m.data(), T, R, W);
  HcCombine(m.data(), xn.data(), h, T, S, H);
}

}  // namespace q38::cpu
