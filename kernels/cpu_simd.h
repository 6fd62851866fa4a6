// Fixed-width float vectors for the CPU backend's fast path (GCC vector extensions). A product
// keeps kLanes partial sums, each in its own lane, added in one fixed tree at the end, so a result
// does not depend on which instruction set runs it: Q38_SIMD_CLONES compiles a function for AVX2
// beside the x86-64 baseline and picks one at load time, and both clones compute the same bits
// (AVX2 without FMA, so no contraction). The lanes are held as pairs of 8-float vectors, the width
// AVX2 registers hold: wider vector types come out of GCC as stack traffic.
#pragma once

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define Q38_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define Q38_SIMD_CLONES
#endif

// Vectors travel in registers between inlined helpers; the note about how a 32-byte vector would
// be passed to a function that is not inlined does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace q38::cpu {

constexpr int kLanes = 16;
typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));

// kLanes partial sums.
struct Lanes {
  Vec8 lo = {}, hi = {};
};

__attribute__((always_inline)) inline Vec8 Load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// acc += x[0..kLanes) · w[0..kLanes), lane by lane.
__attribute__((always_inline)) inline void MulAdd(Lanes& acc, const Vec8& x_lo, const Vec8& x_hi, const float* w) {
  acc.lo += x_lo * Load8(w);
  acc.hi += x_hi * Load8(w + 8);
}

// Σ lanes, pairwise in a fixed order.
__attribute__((always_inline)) inline float SumLanes(const Lanes& v) {
  float s[kLanes];
  std::memcpy(s, &v.lo, sizeof(v.lo));
  std::memcpy(s + 8, &v.hi, sizeof(v.hi));
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  }
  return s[0];
}

}  // namespace q38::cpu
