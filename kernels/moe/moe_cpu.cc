#include "kernels/moe/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/dtype.h"
#include "kernels/activation.h"
#include "kernels/linear/linear.h"

namespace q38::cpu {

void RouterTopK(const float* logits, int32_t* idx, float* w, int64_t T, int64_t E, int64_t k) {
  std::vector<float> p(E);
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    const float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (float& v : p) v = static_cast<float>(v / sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return p[a] != p[b] ? p[a] > p[b] : a < b;
    });
    float top = 0;
    for (int64_t j = 0; j < k; ++j) top += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      idx[t * k + j] = order[j];
      w[t * k + j] = p[order[j]] / top;
    }
  }
}

void DequantizeNvfp4Row(const Nvfp4Experts& x, int64_t expert, int64_t n, float* row) {
  const uint8_t* codes = x.codes + (expert * x.N + n) * (x.K / 2);
  const uint8_t* scales = x.scales + (expert * x.N + n) * (x.K / 16);
  const float global = n < x.split ? x.global_a[expert] : x.global_b[expert];
  for (int64_t j = 0; j < x.K; ++j) {
    const uint8_t code = (j % 2 == 0) ? (codes[j / 2] & 0xF) : (codes[j / 2] >> 4);
    // Exact in double: a 4-bit value times an E4M3 value times a float.
    row[j] = static_cast<float>(static_cast<double>(E2m1ToFloat(code)) *
                                E4m3ToFloat(scales[j / 16]) * global);
  }
}

namespace {

// Runs the selected experts of every token, given a way to fetch one expert's projection.
template <typename ProjectFn>
void RunExperts(const float* h, const int32_t* idx, const float* w, float* out, int64_t T,
                int64_t k, int64_t H, int64_t I, ProjectFn project) {
  std::vector<float> gu(2 * I), act(I), y(H);
  std::fill(out, out + T * H, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = idx[t * k + j];
      project(/*down=*/false, e, h + t * H, gu.data());
      SiluMul(gu.data(), act.data(), 1, I);
      project(/*down=*/true, e, act.data(), y.data());
      for (int64_t c = 0; c < H; ++c) out[t * H + c] += w[t * k + j] * y[c];
    }
  }
}

}  // namespace

void RoutedExperts(const float* h, const int32_t* idx, const float* w, const Nvfp4Experts& gate_up,
                   const Nvfp4Experts& down, float* out, int64_t T, int64_t k) {
  std::vector<float> row(std::max(gate_up.K, down.K));
  auto project = [&](bool is_down, int32_t e, const float* x, float* y) {
    const Nvfp4Experts& p = is_down ? down : gate_up;
    for (int64_t n = 0; n < p.N; ++n) {
      DequantizeNvfp4Row(p, e, n, row.data());
      Linear(x, row.data(), y + n, 1, p.K, 1);
    }
  };
  RunExperts(h, idx, w, out, T, k, gate_up.K, down.K, project);
}

void RoutedExperts(const float* h, const int32_t* idx, const float* w, const DenseExperts& gate_up,
                   const DenseExperts& down, float* out, int64_t T, int64_t k) {
  auto project = [&](bool is_down, int32_t e, const float* x, float* y) {
    const DenseExperts& p = is_down ? down : gate_up;
    Linear(x, p.w + e * p.N * p.K, y, 1, p.K, p.N);
  };
  RunExperts(h, idx, w, out, T, k, gate_up.K, down.K, project);
}

void SiluMul(const float* gu, float* y, int64_t T, int64_t I) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < I; ++i) y[t * I + i] = Silu(gu[t * 2 * I + i]) * gu[t * 2 * I + I + i];
  }
}

void AddSigmoidGated(float* out, const float* shared, const float* gate_logit, int64_t gate_stride,
                     int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    const float s = Sigmoid(gate_logit[t * gate_stride]);
    for (int64_t c = 0; c < H; ++c) out[t * H + c] += s * shared[t * H + c];
  }
}

}  // namespace q38::cpu
