// Device buffers for the lab benches: an owned cudaMalloc'd array, FP16 device data read back as
// floats, a digest of an output's bits, and deterministic pseudo-random fills.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace q38::bench {

// A value in [-0.5, 0.5) from an index and a seed.
__device__ __forceinline__ float HashUnit(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) * 40503u ^ seed;
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12, h *= 0x297a2d39u, h ^= h >> 15;
  return (h >> 8) * (1.0f / 16777216.0f) - 0.5f;  // [-0.5, 0.5)
}

__global__ void FillHalfKernel(__half* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = __float2half(scale * HashUnit(i, seed));
}

__global__ void FillFloatKernel(float* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = scale * HashUnit(i, seed);
}

template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { Q38_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

inline std::vector<float> ToHost(const __half* d, size_t n) {
  std::vector<__half> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(__half), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __half2float(h[i]);
  return f;
}

inline std::vector<float> ToHost(const float* d, size_t n) {
  std::vector<float> f(n);
  Q38_CUDA_CHECK(cudaMemcpy(f.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return f;
}

// FNV-1a over an output's bits, a value at a time: two builds that print the same digest wrote the
// same bits.
template <typename Bits, typename T>
uint64_t DigestAs(const T* d, int64_t n) {
  static_assert(sizeof(Bits) == sizeof(T));
  std::vector<Bits> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  uint64_t x = 1469598103934665603ull;
  for (Bits v : h) x = (x ^ v) * 1099511628211ull;
  return x;
}
inline uint64_t Digest(const __half* d, int64_t n) { return DigestAs<uint16_t>(d, n); }
inline uint64_t Digest(const float* d, int64_t n) { return DigestAs<uint32_t>(d, n); }

}  // namespace q38::bench
