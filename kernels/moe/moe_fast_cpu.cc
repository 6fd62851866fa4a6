// The fast path of the routed experts: the (token, slot) pairs grouped by expert, each expert's
// rows decoded to FP32 a tile at a time (the very values DequantizeNvfp4Row gives) and multiplied
// by LinearFast for every token routed to it, so a prefill decodes each expert once per chunk of
// tokens instead of once per token. Each token still adds its slots in slot order.
#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

#include "common/dtype.h"
#include "kernels/linear/linear.h"
#include "kernels/moe/moe.h"

namespace q38::cpu {
namespace {

constexpr int64_t kTileRows = 64;     // decoded rows in flight: 64 × K floats stay in L2
constexpr int64_t kTokenChunk = 256;  // tokens whose pair outputs are held at once

struct Tables {
  std::array<float, 16> e2m1;
  std::array<float, 256> e4m3;
};
const Tables& Lookup() {
  static const Tables t = [] {
    Tables x;
    for (int i = 0; i < 16; ++i) x.e2m1[i] = E2m1ToFloat(static_cast<uint8_t>(i));
    for (int i = 0; i < 256; ++i) x.e4m3[i] = E4m3ToFloat(static_cast<uint8_t>(i));
    return x;
  }();
  return t;
}

// Rows [n0, n0 + rows) of one expert into tile [rows, K]. code × scale is exact in FP32 (at most
// six significant bits), so one rounding by the global gives DequantizeNvfp4Row's bits.
void DecodeRows(const Nvfp4Experts& p, int64_t e, int64_t n0, int64_t rows, float* tile) {
  const Tables& t = Lookup();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    const uint8_t* codes = p.codes + (e * p.N + n) * (p.K / 2);
    const uint8_t* scales = p.scales + (e * p.N + n) * (p.K / 16);
    const float global = n < p.split ? p.global_a[e] : p.global_b[e];
    float* row = tile + r * p.K;
    for (int64_t b = 0; b < p.K / 16; ++b) {
      const float s = t.e4m3[scales[b]];
      for (int i = 0; i < 8; ++i) {
        const uint8_t c = codes[b * 8 + i];
        row[16 * b + 2 * i] = t.e2m1[c & 0xF] * s * global;
        row[16 * b + 2 * i + 1] = t.e2m1[c >> 4] * s * global;
      }
    }
  }
}

// y [G, N] = x [G, K] · W_eᵀ for one expert.
void Project(const Nvfp4Experts& p, int64_t e, const float* x, int64_t G, float* y, std::vector<float>& tile) {
  tile.resize(kTileRows * p.K);
  for (int64_t n0 = 0; n0 < p.N; n0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, p.N - n0);
    DecodeRows(p, e, n0, rows, tile.data());
    LinearFast(x, tile.data(), y + n0, G, p.K, rows, p.N);
  }
}
void Project(const DenseExperts& p, int64_t e, const float* x, int64_t G, float* y, std::vector<float>&) {
  LinearFast(x, p.w + e * p.N * p.K, y, G, p.K, p.N, p.N);
}

template <typename Experts>
void Run(const float* h, const int32_t* idx, const float* w, const Experts& gate_up, const Experts& down, float* out,
         int64_t T, int64_t k) {
  const int64_t H = gate_up.K, I = down.K;
  std::fill(out, out + T * H, 0.0f);
  std::vector<float> tile, x, gu, act, y, pair_out;
  std::vector<int64_t> pairs;
  for (int64_t t0 = 0; t0 < T; t0 += kTokenChunk) {
    const int64_t n_pairs = std::min(kTokenChunk, T - t0) * k, p0 = t0 * k;
    pairs.resize(n_pairs);
    std::iota(pairs.begin(), pairs.end(), p0);
    std::stable_sort(pairs.begin(), pairs.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
    pair_out.resize(n_pairs * H);
    for (int64_t a = 0; a < n_pairs;) {
      const int32_t e = idx[pairs[a]];
      int64_t b = a;
      while (b < n_pairs && idx[pairs[b]] == e) ++b;
      const int64_t G = b - a;
      x.resize(G * H);
      for (int64_t g = 0; g < G; ++g) std::copy_n(h + pairs[a + g] / k * H, H, x.data() + g * H);
      gu.resize(G * 2 * I);
      act.resize(G * I);
      y.resize(G * H);
      Project(gate_up, e, x.data(), G, gu.data(), tile);
      SiluMul(gu.data(), act.data(), G, I);
      Project(down, e, act.data(), G, y.data(), tile);
      for (int64_t g = 0; g < G; ++g) std::copy_n(y.data() + g * H, H, pair_out.data() + (pairs[a + g] - p0) * H);
      a = b;
    }
    for (int64_t p = 0; p < n_pairs; ++p) {
      float* o = out + (p0 + p) / k * H;
      const float weight = w[p0 + p];
      const float* yp = pair_out.data() + p * H;
      for (int64_t c = 0; c < H; ++c) o[c] += weight * yp[c];
    }
  }
}

}  // namespace

void RoutedExpertsFast(const float* h, const int32_t* idx, const float* w, const Nvfp4Experts& gate_up,
                       const Nvfp4Experts& down, float* out, int64_t T, int64_t k) {
  Run(h, idx, w, gate_up, down, out, T, k);
}
void RoutedExpertsFast(const float* h, const int32_t* idx, const float* w, const DenseExperts& gate_up,
                       const DenseExperts& down, float* out, int64_t T, int64_t k) {
  Run(h, idx, w, gate_up, down, out, T, k);
}

}  // namespace q38::cpu
