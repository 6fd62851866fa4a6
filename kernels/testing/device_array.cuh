// Device buffers for the lab benches: an owned cudaMalloc'd array, FP16 device data read back as
// floats, and deterministic pseudo-random fills.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
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

// Σ(got − want)² / Σ want², infinite where got holds a NaN or an infinity (an unwritten output).
inline double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::isfinite(err) ? err / std::max(norm, 1e-30) : INFINITY;
}

// Runs `first`, keeps its output out [n] in want, poisons out, runs `second`, and returns the NMSE
// of second's output against first's.
inline double NmseOfSecond(const std::function<void()>& first, const std::function<void()>& second, __half* out,
                           __half* want, int64_t n, cudaStream_t s) {
  first();
  Q38_CUDA_CHECK(cudaMemcpyAsync(want, out, n * sizeof(__half), cudaMemcpyDeviceToDevice, s));
  Q38_CUDA_CHECK(cudaMemsetAsync(out, 0xff, n * sizeof(__half), s));
  second();
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  return Nmse(ToHost(out, n), ToHost(want, n));
}

}  // namespace q38::bench
