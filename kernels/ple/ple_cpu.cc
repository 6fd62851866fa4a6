#include "kernels/ple/ple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/activation.h"

namespace q38::cpu {
namespace {

float TableValue(const PleTable& t, int64_t row, int64_t col) {
  const size_t size = DTypeSize(t.dtype);
  const uint8_t* p = t.shards[row / t.rows_per_shard] + ((row % t.rows_per_shard) * t.row_width + col) * size;
  switch (t.dtype) {
    case DType::kF8E4M3:
      return E4m3ToFloat(*p);
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return Bf16ToFloat(v);
    }
    default: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

}  // namespace

void PleGather(const PleTable& table, const int64_t* rows, float* E, int64_t T, int64_t heads) {
  const int64_t w = table.row_width;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = rows[t * heads + h];
      float* out = E + (t * heads + h) * w;
      for (int64_t c = 0; c < w; ++c) out[c] = TableValue(table, row, c) * table.scale;
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
