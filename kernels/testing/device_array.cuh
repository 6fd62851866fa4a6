// Device buffers for the lab benches: an owned cudaMalloc'd array, and FP16 device data read back
// as floats.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace q38::bench {

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

}  // namespace q38::bench
