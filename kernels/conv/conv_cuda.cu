#include "kernels/conv/conv4_tap.cuh"
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

// The GDN layers' conv (4 taps, dilation 1) where C % 8 == 0 and the pointers are 16-byte
// aligned: a thread per (8 channels, tile of kTile tokens) keeps the last three rows of its
// channels in registers and reads each input row once, 16 bytes at a time, kAhead rows ahead, so a
// prefill call streams at memory speed. Sums in CausalConvKernel's order (Conv4Tap): the same bits.
constexpr int kTaps4 = kConv4Taps, kAhead = 8;
__global__ void __launch_bounds__(128) CausalConv4Kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                                         __half* state, __half* __restrict__ y, int64_t T, int64_t C) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= C) return;
  constexpr int kHist = kTaps4 - 1;
  const int64_t t0 = blockIdx.y * kTile, t1 = min(T, t0 + kTile);
  // Timeline row u: the history rows, then this call's rows.
  auto row = [&](int64_t u, float* v) { LoadF<8>(u < kHist ? state + u * C + c : x + (u - kHist) * C + c, v); };
  float wk[8][kTaps4], win[kHist][8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int k = 0; k < kTaps4; ++k) wk[j][k] = __half2float(w[(c + j) * kTaps4 + k]);
  }
#pragma unroll
  for (int i = 0; i < kHist; ++i) row(t0 + i, win[i]);
  for (int64_t t = t0; t < t1; t += kAhead) {
    uint4 raw[kAhead];  // the rows as loaded, FP16 until used
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      if (t + a < t1) raw[a] = __ldg(reinterpret_cast<const uint4*>(x + (t + a) * C + c));
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      if (t + a >= t1) break;
      float in[8], out[8];
      LoadF<8>(reinterpret_cast<const __half*>(&raw[a]), in);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float hist[kHist] = {win[0][j], win[1][j], win[2][j]};
        out[j] = Conv4Tap(wk[j], hist, in[j]);
      }
      StoreHalves<8>(y + (t + a) * C + c, out);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        win[0][j] = win[1][j];
        win[1][j] = win[2][j];
        win[2][j] = in[j];
      }
    }
  }
  if (blockIdx.y != 0) return;
  // The new history is the last three rows of the timeline; read all before writing any.
  float next[kHist][8];
#pragma unroll
  for (int i = 0; i < kHist; ++i) row(T + i, next[i]);
#pragma unroll
  for (int i = 0; i < kHist; ++i) StoreHalves<8>(state + i * C + c, next[i]);
}

}  // namespace

void CausalConv(const __half* x, const __half* w, __half* state, __half* y, int64_t T, int64_t C, int64_t K,
                int64_t dilation, cudaStream_t stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(state) |
                        reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  if (K == kTaps4 && dilation == 1 && C % 8 == 0 && aligned) {
    CausalConv4Kernel<<<dim3(CeilDiv(C / 8, 128), CeilDiv(T, kTile)), 128, 0, stream>>>(x, w, state, y, T, C);
  } else {
    CausalConvKernel<<<dim3(CeilDiv(C, 128), CeilDiv(T, kTile)), 128, 0, stream>>>(x, w, state, y, T, C, K, dilation);
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
