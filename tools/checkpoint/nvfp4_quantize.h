// ModelOpt NVFP4 quantization of one linear weight (docs/model.md §14.1, §14.5): the inverse of the
// dequantization in kernels/moe, W[n,k] ≈ e2m1(code) · e4m3(scale[n, k/16]) · global.
#pragma once

#include <cstdint>
#include <vector>

namespace q38 {

struct Nvfp4Weight {
  std::vector<uint8_t> codes;   // [N, K/2], element 2j in the low nibble of byte j
  std::vector<uint8_t> scales;  // [N, K/16], E4M3
  float global = 1.0f;          // weight_scale_2
};

// ModelOpt's per-tensor global: amax/(6·448), so the largest block scale is 448 (E4M3's max).
// 1 for an all-zero tensor (any value dequantizes zeros to zero).
float Nvfp4Global(float amax);

// Quantizes W [N, K] (K a multiple of 16) with the given global: each 16-block's scale is
// E4M3(amax_block / (6·global)) rounded to nearest, and each element the nearest E2M1 code of
// w / (scale·global) (ties to the even code, saturating at ±6).
Nvfp4Weight QuantizeNvfp4(const float* w, int64_t N, int64_t K, float global);

}  // namespace q38
