// SplitMix64 (Steele, Lea & Flood): one step of the generator seeded with v. The PLE n-gram hash
// derives its multipliers with it (MODEL.md §6.1), and the sampler and the checkpoint generator
// use it as a counter-based random source.
#pragma once

#include <cstdint>

namespace q38 {

inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

inline uint64_t SplitMix64(uint64_t v) {
  v += kSplitMix64Gamma;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

}  // namespace q38
