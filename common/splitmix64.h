// SplitMix64 (Steele, Lea & Flood): one step of the generator seeded with v. The PLE n-gram hash
// derives its multipliers with it (docs/model.md §6.1), and the sampler and the checkpoint generator
// use it as a counter-based random source. Host and device code share it (synthetic weights are
// drawn alike by the CPU and CUDA backends).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define Q38_HOST_DEVICE __host__ __device__
#else
#define Q38_HOST_DEVICE
#endif

namespace q38 {

inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

Q38_HOST_DEVICE inline uint64_t SplitMix64(uint64_t v) {
  v += kSplitMix64Gamma;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

// Draw i of the stream `seed`, independent of the order draws are made in.
Q38_HOST_DEVICE inline uint64_t CounterDraw(uint64_t seed, uint64_t i) { return SplitMix64(seed ^ SplitMix64(i)); }

// Synthetic weight values (Backend::FillRandom): uniform in ±spread; a uniform byte; and an
// E4M3 byte of magnitude in [1/4, 4), usable as an NVFP4 block scale.
Q38_HOST_DEVICE inline float SyntheticUniform(uint64_t seed, uint64_t i, float spread) {
  return (2.0f * static_cast<float>(CounterDraw(seed, i) >> 40) / 16777216.0f - 1.0f) * spread;
}
Q38_HOST_DEVICE inline uint8_t SyntheticByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(CounterDraw(seed, i) >> 56);
}
Q38_HOST_DEVICE inline uint8_t SyntheticScaleByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(0x28 + (CounterDraw(seed, i) >> 59));
}

}  // namespace q38
