// QuantizeNvfp4 checked through the project's own dequantization (kernels/moe): every element
// decodes to the nearest point of its block's grid, block scales and the global follow
// ModelOpt's rule, values already on a grid come back exactly, and zero blocks stay zero.
#include "tools/checkpoint/nvfp4_quantize.h"

#include <cmath>
#include <random>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"

namespace q38 {
namespace {

constexpr float kGrid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

std::vector<float> Dequantize(const Nvfp4Weight& q, int64_t N, int64_t K) {
  const cpu::Nvfp4Experts x{q.codes.data(), q.scales.data(), &q.global, &q.global, N, N, K};
  std::vector<float> out(N * K);
  for (int64_t n = 0; n < N; ++n) cpu::DequantizeNvfp4Row(x, 0, n, out.data() + n * K);
  return out;
}

float Amax(const std::vector<float>& w) {
  float m = 0;
  for (float v : w) m = std::max(m, std::fabs(v));
  return m;
}

TEST(QuantizeNvfp4, NearestGridPointPerBlock) {
  const int64_t N = 6, K = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> w(N * K);
  for (int64_t i = 0; i < N * K; ++i) w[i] = normal(rng) * std::pow(4.0f, static_cast<float>(i / 16 % 4) - 2);
  const float global = Nvfp4Global(Amax(w));
  EXPECT_FLOAT_EQ(global, Amax(w) / 2688.0f);
  const Nvfp4Weight q = QuantizeNvfp4(w.data(), N, K, global);
  ASSERT_EQ(q.codes.size(), size_t(N * K / 2));
  ASSERT_EQ(q.scales.size(), size_t(N * K / 16));
  const std::vector<float> d = Dequantize(q, N, K);
  double err = 0, ref = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < K / 16; ++b) {
      float amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(w[n * K + b * 16 + j]));
      const uint8_t scale = q.scales[n * K / 16 + b];
      EXPECT_EQ(scale, FloatToE4m3(amax / (6 * global))) << "row " << n << " block " << b;
      const float step = E4m3ToFloat(scale) * global;
      for (int j = 0; j < 16; ++j) {
        const int64_t i = n * K + b * 16 + j;
        float best = INFINITY;  // distance to the nearest representable value of this block
        for (float g : kGrid) best = std::min({best, std::fabs(w[i] - g * step), std::fabs(w[i] + g * step)});
        // A margin for near-ties: w/step is rounded before the nearest code is picked.
        EXPECT_LE(std::fabs(w[i] - d[i]), best + 1e-5f * step) << "element " << i;
        err += (w[i] - d[i]) * (w[i] - d[i]);
        ref += w[i] * w[i];
      }
    }
  }
  EXPECT_LT(std::sqrt(err / ref), 0.12);  // 4-bit codes with per-16 scales: ~8% RMS error
}

TEST(QuantizeNvfp4, ValuesOnTheGridComeBackExactly) {
  const int64_t N = 2, K = 32;
  const float global = 0.125f;
  std::vector<float> w(N * K);
  for (int64_t i = 0; i < N * K; ++i) {
    const float block_scale = (i / 16 % 2 == 0) ? 2.0f : 0.75f;  // both exact in E4M3
    // Every block holds a ±6, so its scale is recovered exactly.
    const float code = (i % 16 == 0) ? 6.0f : kGrid[i % 8];
    w[i] = (i % 3 == 0 ? -1 : 1) * code * block_scale * global;
  }
  const Nvfp4Weight q = QuantizeNvfp4(w.data(), N, K, global);
  EXPECT_EQ(Dequantize(q, N, K), w);
  // Element 2j in the low nibble: w[0] = -6 → code 0xF, w[1] = +0.5 → code 0x1.
  EXPECT_EQ(q.codes[0], 0x1F);
}

TEST(QuantizeNvfp4, ZeroBlocksAndTheZeroTensor) {
  const int64_t N = 1, K = 32;
  std::vector<float> w(N * K, 0.0f);
  w[20] = 2.625f;  // only the second block is non-zero; global 2.625/2688 = 2^-10 is exact
  const Nvfp4Weight q = QuantizeNvfp4(w.data(), N, K, Nvfp4Global(2.625f));
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(Dequantize(q, N, K), w);
  std::vector<float> zeros(N * K, 0.0f);
  EXPECT_EQ(Nvfp4Global(0.0f), 1.0f);
  const Nvfp4Weight z = QuantizeNvfp4(zeros.data(), N, K, Nvfp4Global(0.0f));
  EXPECT_EQ(Dequantize(z, N, K), zeros);
}

}  // namespace
}  // namespace q38
