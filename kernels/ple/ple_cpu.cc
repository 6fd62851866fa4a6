#include "kernels/ple/ple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/activation.h"

namespace q38 {

void PleStageRows(const PleTable& table, const int64_t* rows, int64_t n, uint8_t* staged) {
  const size_t row_bytes = table.row_width * DTypeSize(table.dtype);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = rows[i];
    std::memcpy(staged + i * row_bytes, table.shards[row / table.rows_per_shard] + (row % table.rows_per_shard) * row_bytes,
                row_bytes);
  }
}

}  // namespace q38

namespace q38::cpu {

void PleLoad(const uint8_t* staged, DType dtype, float scale, float* E, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF8E4M3:
        E[i] = E4m3ToFloat(staged[i]) * scale;
        break;
      case DType::kBF16: {
        uint16_t v;
        std::memcpy(&v, staged + 2 * i, 2);
        E[i] = Bf16ToFloat(v) * scale;
        break;
      }
      default: {
        float v;
        std::memcpy(&v, staged + 4 * i, 4);
        E[i] = v * scale;
      }
    }
  }
}

void PleGate(const float* kn, const float* qn, const float* v, float* G, int64_t T, int64_t S, int64_t H) {
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t base = (t * S + s) * H;
      double dot = 0;
      for (int64_t c = 0; c < H; ++c) dot += static_cast<double>(kn[base + c]) * qn[base + c];
      float a = static_cast<float>(dot) * inv_sqrt;
      const float mag = std::sqrt(std::max(std::fabs(a), 1e-6f));
      a = a > 0 ? mag : (a < 0 ? -mag : 0.0f);
      const float gate = Sigmoid(a);
      for (int64_t c = 0; c < H; ++c) G[base + c] = gate * v[t * H + c];
    }
  }
}

}  // namespace q38::cpu
