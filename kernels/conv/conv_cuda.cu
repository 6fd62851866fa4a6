#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace q38::cuda {
namespace {

// A thread per (channel, tile of kTile tokens); the timeline is the history rows followed by this
// call's rows, read from wherever each row lives. Only the first tile reaches back into the
// history (kTile ≥ any history), so its threads alone may rewrite it, after their own reads.
constexpr int64_t kTile = 64;
static_assert(kTile >= kConvMaxHistory, "only the first tile may read the history it rewrites");

__global__ void CausalConvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* state,
                                 __half* __restrict__ y, int64_t T, int64_t C, int64_t K, int64_t dilation) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t hist = (K - 1) * dilation, t0 = blockIdx.y * kTile;
  auto line = [&](int64_t u) { return __half2float(u < hist ? state[u * C + c] : x[(u - hist) * C + c]); };
  for (int64_t t = t0; t < min(T, t0 + kTile); ++t) {
    float acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += __half2float(w[c * K + k]) * line(hist + t - dilation * (K - 1 - k));
    y[t * C + c] = __float2half(Silu(acc));
  }
  if (blockIdx.y != 0) return;
  // The new history is the last `hist` rows of the timeline; read all before writing any.
  __half next[kConvMaxHistory];
  for (int64_t i = 0; i < hist; ++i) next[i] = __float2half(line(T + i));
  for (int64_t i = 0; i < hist; ++i) state[i * C + c] = next[i];
}

}  // namespace

void CausalConv(const __half* x, const __half* w, __half* state, __half* y, int64_t T, int64_t C, int64_t K,
                int64_t dilation, cudaStream_t stream) {
  CausalConvKernel<<<dim3(CeilDiv(C, 128), CeilDiv(T, kTile)), 128, 0, stream>>>(x, w, state, y, T, C, K, dilation);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
