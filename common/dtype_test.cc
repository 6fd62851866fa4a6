#include "common/dtype.h"

#include <cmath>

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kU8, DType::kI32, DType::kI64,
                  DType::kF8E4M3}) {
    EXPECT_EQ(DTypeFromName(DTypeName(t)), t);
  }
  EXPECT_FALSE(DTypeFromName("F8_E5M2").has_value());
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
}

TEST(DType, Bf16KnownBits) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties to even keeps 1.
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3F80);
  // 1 + 3·2^-8 is half way between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3F82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(DType, Fp16KnownBits) {
  EXPECT_EQ(Fp16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(70000.0f), 0x7C00);
  EXPECT_EQ(FloatToFp16(-1.5f), 0xBE00);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even
}

TEST(DType, Fp16RoundTripsEveryFiniteValue) {
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    if (((h >> 10) & 0x1F) == 31) continue;  // inf and NaN
    ASSERT_EQ(FloatToFp16(Fp16ToFloat(h)), h) << v;
  }
}

TEST(DType, E4m3KnownValues) {
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);    // exponent 7, mantissa 0
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);  // the largest finite value
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xFF)));
  EXPECT_EQ(E4m3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(FloatToE4m3(1000.0f), 0x7E);  // saturates
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    if (c == 0x80) continue;  // -0 encodes back as -0 too, checked below
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c);
  }
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
}

TEST(DType, E2m1Codes) {
  const float expected[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c)), expected[c]) << c;
  EXPECT_EQ(FloatToE2m1(2.5f), 0x4);   // tie between 2 (code 4) and 3 (code 5): even code
  EXPECT_EQ(FloatToE2m1(-5.0f), 0xE);  // tie between 4 (6) and 6 (7): even code 6
  EXPECT_EQ(FloatToE2m1(0.2f), 0x0);
  EXPECT_EQ(FloatToE2m1(9.0f), 0x7);
}

}  // namespace
}  // namespace q38
