#include "common/dtype.h"

#include <array>
#include <bit>
#include <cmath>

namespace q38 {
namespace {

constexpr std::array<std::string_view, 7> kNames = {"F32", "F16", "BF16", "U8", "I32", "I64",
                                                    "F8_E4M3"};
constexpr std::array<size_t, 7> kSizes = {4, 2, 2, 1, 4, 8, 1};
constexpr std::array<float, 8> kE2m1Magnitudes = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};

}  // namespace

size_t DTypeSize(DType t) { return kSizes[static_cast<size_t>(t)]; }
std::string_view DTypeName(DType t) { return kNames[static_cast<size_t>(t)]; }

std::optional<DType> DTypeFromName(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

float Bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float Fp16ToFloat(uint16_t v) {
  const uint32_t sign = (v & 0x8000u) << 16;
  const uint32_t exp = (v >> 10) & 0x1F;
  const uint32_t man = v & 0x3FF;
  if (exp == 0) {  // zero or subnormal: man · 2^-24
    const float mag = std::ldexp(static_cast<float>(man), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToFp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7E00;
  const float a = std::fabs(f);
  if (a >= 65520.f) return sign | 0x7C00;  // rounds past the largest finite half
  if (a < 6.103515625e-05f) {               // subnormal half: multiples of 2^-24
    const float q = std::nearbyint(a * 16777216.f);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t m = u & 0x7FFFFFFF;
  m += 0xFFF + ((m >> 13) & 1);  // round mantissa from 23 to 10 bits, nearest even
  return sign | static_cast<uint16_t>((m >> 13) - (112 << 10));
}

namespace {

float DecodeE4m3(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xF;
  const int man = v & 0x7;
  if (exp == 15 && man == 7) return std::nanf("");
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                             : std::ldexp(1.f + man / 8.f, exp - 7);
  return neg ? -mag : mag;
}

}  // namespace

// A table: expert dequantization reads one scale per 16 weights, on the hot path of the reference.
float E4m3ToFloat(uint8_t v) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int i = 0; i < 256; ++i) t[i] = DecodeE4m3(static_cast<uint8_t>(i));
    return t;
  }();
  return table[v];
}

uint8_t FloatToE4m3(float f) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fmin(std::fabs(f), 448.f);
  // Exhaustive nearest search over the 127 non-negative finite codes; ties go to the even code.
  uint8_t best = 0;
  float best_err = INFINITY;
  for (uint8_t c = 0; c < 0x7F; ++c) {
    const float err = std::fabs(E4m3ToFloat(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

float E2m1ToFloat(uint8_t code) {
  const float mag = kE2m1Magnitudes[code & 0x7];
  return (code & 0x8) ? -mag : mag;
}

uint8_t FloatToE2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 0x8 : 0;
  const float a = std::fmin(std::fabs(f), 6.f);
  uint8_t best = 0;
  float best_err = INFINITY;
  for (uint8_t c = 0; c < 8; ++c) {
    const float err = std::fabs(kE2m1Magnitudes[c] - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

}  // namespace q38
