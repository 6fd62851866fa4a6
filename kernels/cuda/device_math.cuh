// Device helpers shared by the kernels: warp and block reductions, FP16 ↔ FP32 loads, the
// activations in FP32 (matching kernels/activation.h), and the launch-size arithmetic.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

namespace q38::cuda {

constexpr int kWarp = 32;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
__device__ __forceinline__ int64_t CeilDivDevice(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A grid of kTokenColumnThreads-thread blocks over a [T, C] row-major operand, for per-token
// elementwise kernels: blockIdx.x covers the columns (TokenColumn), blockIdx.y the tokens, a
// block stepping by gridDim.y past 65,535 of them. No thread divides a 64-bit flat index: three
// such divisions an element made the prefill's elementwise kernels bound by arithmetic, not memory.
constexpr int kTokenColumnThreads = 256;
inline dim3 TokenColumnGrid(int64_t T, int64_t C) {
  return dim3(static_cast<unsigned>(CeilDiv(C, kTokenColumnThreads)),
              static_cast<unsigned>(T < 1 ? 1 : T < 65535 ? T : 65535));
}
__device__ __forceinline__ int64_t TokenColumn() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

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
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ __half FromF<__half>(float x) { return __float2half(x); }
template <>
__device__ __forceinline__ float FromF<float>(float x) { return x; }

// kN (8 or 1) consecutive FP16 or FP32 values as FP32; 8 halves move as one 16-byte access, 8
// floats as two.
template <int kN>
__device__ __forceinline__ void LoadF(const __half* p, float* v) {
  if constexpr (kN == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else {
    v[0] = __half2float(*p);
  }
}
template <int kN>
__device__ __forceinline__ void LoadF(const float* p, float* v) {
  if constexpr (kN == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    v[0] = *p;
  }
}
template <int kN>
__device__ __forceinline__ void StoreHalves(__half* p, const float* v) {
  if constexpr (kN == 8) {
    uint4 u;
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    *p = __float2half(v[0]);
  }
}

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
