#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/ple/ple_cuda.h"

namespace q38::cuda {
namespace {

__global__ void PleLoadKernel(const uint8_t* __restrict__ staged, int dtype_size, bool fp8, float scale,
                              __half* __restrict__ E, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v;
  if (fp8) {
    v = E4m3(staged[i]);
  } else if (dtype_size == 2) {  // BF16: the high half of an FP32
    v = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(staged)[i]) << 16);
  } else {
    v = reinterpret_cast<const float*>(staged)[i];
  }
  E[i] = __float2half(v * scale);
}

// One block per (token, stream): the scaled dot product, its signed square root, the gate.
__global__ void PleGateKernel(const __half* __restrict__ kn, const __half* __restrict__ qn,
                              const __half* __restrict__ v, __half* __restrict__ G, int64_t S, int64_t H) {
  const int64_t ts = blockIdx.x, t = ts / S, base = ts * H;
  float dot = 0;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) dot += __half2float(kn[base + c]) * __half2float(qn[base + c]);
  float a = BlockSum(dot) * rsqrtf(static_cast<float>(H));
  const float mag = sqrtf(fmaxf(fabsf(a), 1e-6f));
  a = a > 0 ? mag : (a < 0 ? -mag : 0.0f);
  const float gate = Sigmoid(a);
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) G[base + c] = __float2half(gate * __half2float(v[t * H + c]));
}

}  // namespace

void PleLoad(const uint8_t* staged, DType dtype, float scale, __half* E, int64_t n, cudaStream_t stream) {
  PleLoadKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(staged, static_cast<int>(DTypeSize(dtype)),
                                                     dtype == DType::kF8E4M3, scale, E, n);
  Q38_CUDA_LAUNCHED();
}

void PleGate(const __half* kn, const __half* qn, const __half* v, __half* G, int64_t T, int64_t S, int64_t H,
             cudaStream_t stream) {
  PleGateKernel<<<T * S, 256, 0, stream>>>(kn, qn, v, G, S, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
