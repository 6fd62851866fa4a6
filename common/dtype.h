// Element types that appear in checkpoints and on devices, and exact scalar conversions between
// them and float. Every conversion here is the reference that kernels are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace q38 {

enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kI32, kI64, kF8E4M3 };

// Bytes per element.
size_t DTypeSize(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);  // round to nearest even; NaN stays NaN
float Fp16ToFloat(uint16_t v);
uint16_t FloatToFp16(float f);  // round to nearest even; overflow goes to ±inf
float E4m3ToFloat(uint8_t v);   // float8_e4m3fn: bias 7, no infinities, 0x7F/0xFF are NaN
uint8_t FloatToE4m3(float f);   // round to nearest even, saturating at ±448
float E2m1ToFloat(uint8_t code);  // low 4 bits: sign in bit 3, magnitudes {0,.5,1,1.5,2,3,4,6}
uint8_t FloatToE2m1(float f);     // round to nearest, ties to the even code, saturating at ±6

// Round a float through BF16 and back, the rounding the reference applies between ops.
inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace q38
