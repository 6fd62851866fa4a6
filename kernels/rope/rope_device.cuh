// The rotation of one RoPE pair on the device, shared by the RoPE kernel and the indexer's block
// pooling so that both rotate exactly alike.
#pragma once

#include <cstdint>

namespace q38::cuda {

__device__ __forceinline__ void RotatePair(float& a, float& b, int64_t position, int64_t i, int64_t rotary_dim,
                                           float theta) {
  const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  float s, c;
  sincosf(static_cast<float>(position) * inv_freq, &s, &c);
  const float ra = a * c - b * s, rb = b * c + a * s;
  a = ra;
  b = rb;
}

}  // namespace q38::cuda
