#include "common/splitmix64.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"

namespace q38::cuda {
namespace {

template <typename T>
__global__ void FillKernel(T* x, T value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

__global__ void FillRandomKernel(void* x, RandomKind kind, uint64_t seed, float spread, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  switch (kind) {
    case RandomKind::kHalf:
      static_cast<__half*>(x)[i] = __float2half(SyntheticUniform(seed, i, spread));
      break;
    case RandomKind::kFloat:
      static_cast<float*>(x)[i] = SyntheticUniform(seed, i, spread);
      break;
    case RandomKind::kByte:
      static_cast<uint8_t*>(x)[i] = SyntheticByte(seed, i);
      break;
    case RandomKind::kScaleByte:
      static_cast<uint8_t*>(x)[i] = SyntheticScaleByte(seed, i);
      break;
  }
}

template <typename TX>
__global__ void AddKernel(TX* x, const __half* __restrict__ y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = FromF<TX>(ToF(x[i]) + __half2float(y[i]));
}

__global__ void SigmoidMulKernel(__half* x, const __half* __restrict__ gate, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2half(__half2float(x[i]) * Sigmoid(__half2float(gate[i])));
}

__global__ void WriteRowsKernel(const uint16_t* __restrict__ src, uint16_t* __restrict__ cache,
                                const int64_t* __restrict__ positions, int64_t T, int64_t row) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * row) return;
  cache[positions[i / row] * row + i % row] = src[i];
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>(CeilDiv(std::max<int64_t>(n, 1), 256)); }

}  // namespace

void FillHalf(__half* x, float value, int64_t n, cudaStream_t stream) {
  FillKernel<<<Blocks(n), 256, 0, stream>>>(x, __float2half(value), n);
  Q38_CUDA_LAUNCHED();
}

void FillFloat(float* x, float value, int64_t n, cudaStream_t stream) {
  FillKernel<<<Blocks(n), 256, 0, stream>>>(x, value, n);
  Q38_CUDA_LAUNCHED();
}

void FillRandom(void* x, RandomKind kind, uint64_t seed, float spread, int64_t n, cudaStream_t stream) {
  FillRandomKernel<<<Blocks(n), 256, 0, stream>>>(x, kind, seed, spread, n);
  Q38_CUDA_LAUNCHED();
}

void Add(__half* x, const __half* y, int64_t n, cudaStream_t stream) {
  AddKernel<<<Blocks(n), 256, 0, stream>>>(x, y, n);
  Q38_CUDA_LAUNCHED();
}

void Add(float* x, const __half* y, int64_t n, cudaStream_t stream) {
  AddKernel<<<Blocks(n), 256, 0, stream>>>(x, y, n);
  Q38_CUDA_LAUNCHED();
}

void SigmoidMul(__half* x, const __half* gate, int64_t n, cudaStream_t stream) {
  SigmoidMulKernel<<<Blocks(n), 256, 0, stream>>>(x, gate, n);
  Q38_CUDA_LAUNCHED();
}

void WriteRows(const void* src, void* cache, const int64_t* positions, int64_t T, int64_t row_bytes,
               cudaStream_t stream) {
  const int64_t row = row_bytes / 2;
  WriteRowsKernel<<<Blocks(T * row), 256, 0, stream>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(cache),
                                                      positions, T, row);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
