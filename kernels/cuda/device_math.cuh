// Device helpers shared by the kernels: warp and block reductions, FP16 ↔ FP32 loads, the
// activations in FP32 (matching kernels/activation.h), and the launch-size arithmetic.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

namespace q38::cuda {

constexpr int kWarp = 32;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ int64_t CeilDivDevice(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF(float x) { return x; }

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float Silu(float x) { return x * Sigmoid(x); }
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

// E2M1 code (low 4 bits) to its value, ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, built as FP32 bits (a
// lookup table indexed per element would live in local memory).
__device__ __forceinline__ float E2m1(uint32_t code) {
  const uint32_t m = code & 7u;
  uint32_t bits = m >= 2 ? (((m >> 1) + 126u) << 23) | ((m & 1u) << 22) : (m == 1 ? 126u << 23 : 0u);
  return __uint_as_float(bits | ((code & 8u) << 28));
}

// E4M3 (FN: no infinities, 0x7F/0xFF NaN) to FP32, exactly, from its bits.
__device__ __forceinline__ float E4m3(uint32_t b) {
  const uint32_t sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xFu, man = b & 7u;
  if (exp == 15 && man == 7) return __uint_as_float(0x7fc00000u);
  const float v = exp == 0 ? static_cast<float>(man) * 0.001953125f  // man · 2⁻⁹
                           : __uint_as_float(((exp + 120u) << 23) | (man << 20));
  return __uint_as_float(__float_as_uint(v) | sign);
}

}  // namespace q38::cuda
