#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/gdn/gdn_chunk_cuda.h"
#include "kernels/gdn/gdn_cuda.h"

namespace q38::cuda {
namespace {

__global__ void GdnGatesKernel(const __half* __restrict__ b, const __half* __restrict__ a,
                               const float* __restrict__ a_log, const float* __restrict__ dt_bias, float* beta,
                               float* g, int64_t n, int64_t Hv) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t j = i % Hv;
  beta[i] = Sigmoid(__half2float(b[i]));
  g[i] = -expf(a_log[j]) * Softplus(__half2float(a[i]) + dt_bias[j]);
}

constexpr int kWarps = 4;  // each owns a quarter of the key rows
constexpr int kCols = 32;  // value columns per block, one per lane

// Block (value head j, 32 value columns): thread (warp w, lane l) keeps state rows
// [w·dk/4, (w+1)·dk/4) of column l in registers for the whole call, so the state is read and
// written once however many tokens there are. Per token: decay, the memory read S·k, the delta
// update and the output S·q, the last two summed over the four warps through shared memory.
template <int kDk>
__global__ void __launch_bounds__(kWarps * kWarp)
    GdnDeltaRuleKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                       float* state, __half* __restrict__ o, int64_t T, int64_t Hk, int64_t Hv, int64_t dv) {
  constexpr int kRows = kDk / kWarps;
  __shared__ float qs[kDk], ks[kDk];
  __shared__ float part[kWarps][kCols];
  __shared__ float norms[2];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t j = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * kCols + lane;
  const bool live = col < dv;
  const int64_t kh = j / (Hv / Hk), width = 2 * Hk * kDk + Hv * dv;
  float* S = state + j * kDk * dv;
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = live ? S[(warp * kRows + r) * dv + col] : 0.0f;
  const float q_scale = rsqrtf(static_cast<float>(kDk));
  for (int64_t t = 0; t < T; ++t) {
    const __half* row = qkv + t * width;
    // q and k of this value head's key head, L2-normalized (warp 0 sums q, warp 1 sums k).
    for (int i = threadIdx.x; i < kDk; i += blockDim.x) {
      qs[i] = __half2float(row[kh * kDk + i]);
      ks[i] = __half2float(row[Hk * kDk + kh * kDk + i]);
    }
    __syncthreads();
    if (warp < 2) {
      const float* v = warp == 0 ? qs : ks;
      float ss = 0;
      for (int i = lane; i < kDk; i += kWarp) ss += v[i] * v[i];
      ss = WarpSum(ss);
      if (lane == 0) norms[warp] = rsqrtf(ss + 1e-6f);
    }
    __syncthreads();
    const float qn = norms[0] * q_scale, kn = norms[1];
    const float decay = expf(g[t * Hv + j]), b = beta[t * Hv + j];
    float mem = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] *= decay;
      mem += s[r] * ks[warp * kRows + r] * kn;
    }
    part[warp][lane] = mem;
    __syncthreads();
    mem = part[0][lane] + part[1][lane] + part[2][lane] + part[3][lane];
    const float v = live ? __half2float(row[2 * Hk * kDk + j * dv + col]) : 0.0f;
    const float delta = b * (v - mem);
    float out = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] += ks[warp * kRows + r] * kn * delta;
      out += s[r] * qs[warp * kRows + r] * qn;
    }
    __syncthreads();  // everyone has read part before it is reused
    part[warp][lane] = out;
    __syncthreads();
    if (warp == 0 && live) {
      o[t * Hv * dv + j * dv + col] = __float2half(part[0][lane] + part[1][lane] + part[2][lane] + part[3][lane]);
    }
    __syncthreads();  // part, qs and ks are rewritten for the next token
  }
  if (live) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) S[(warp * kRows + r) * dv + col] = s[r];
  }
}

template <int kDk>
void LaunchGdn(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
               int64_t T, int64_t Hk, int64_t Hv, int64_t dv, cudaStream_t stream) {
  if (T >= kGdnChunk) {
    LaunchGdnChunked<kDk>(qkv, beta, g, state, o, scratch, T, Hk, Hv, dv, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(CeilDiv(dv, kCols)));
  GdnDeltaRuleKernel<kDk><<<grid, kWarps * kWarp, 0, stream>>>(qkv, beta, g, state, o, T, Hk, Hv, dv);
}

}  // namespace

void GdnGates(const __half* b, const __half* a, const float* a_log, const float* dt_bias, float* beta, float* g,
              int64_t T, int64_t Hv, cudaStream_t stream) {
  const int64_t n = T * Hv;
  GdnGatesKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(b, a, a_log, dt_bias, beta, g, n, Hv);
  Q38_CUDA_LAUNCHED();
}

int64_t GdnDeltaRuleScratchFloats(int64_t T, int64_t value_heads) {
  return T < kGdnChunk ? 0 : CeilDiv(T, kGdnChunk) * value_heads * 2 * kGdnChunk * kGdnChunk;
}

void GdnDeltaRule(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
                  int64_t T, int64_t key_heads, int64_t value_heads, int64_t key_dim, int64_t value_dim, cudaStream_t stream) {
  switch (key_dim) {
    case 16:
      LaunchGdn<16>(qkv, beta, g, state, o, scratch, T, key_heads, value_heads, value_dim, stream);
      break;
    case 32:
      LaunchGdn<32>(qkv, beta, g, state, o, scratch, T, key_heads, value_heads, value_dim, stream);
      break;
    case 64:
      LaunchGdn<64>(qkv, beta, g, state, o, scratch, T, key_heads, value_heads, value_dim, stream);
      break;
    case 128:
      LaunchGdn<128>(qkv, beta, g, state, o, scratch, T, key_heads, value_heads, value_dim, stream);
      break;
    default:
      LOG(FATAL) << "GDN key_dim " << key_dim << " has no kernel (16, 32, 64, 128)";
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
