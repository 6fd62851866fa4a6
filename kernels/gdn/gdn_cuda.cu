#include "kernels/conv/conv4_tap.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/gdn/gdn_chunk_cuda.h"
#include "kernels/gdn/gdn_cuda.h"
#include "kernels/norm/rms_norm_group.cuh"

namespace q38::cuda {
namespace {

// The gates of element i (value head j): β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias).
__device__ __forceinline__ void GdnGateValues(const __half* b, const __half* a, const float* a_log,
                                              const float* dt_bias, int64_t i, int64_t j, float& beta, float& g) {
  beta = Sigmoid(__half2float(b[i]));
  g = -expf(a_log[j]) * Softplus(__half2float(a[i]) + dt_bias[j]);
}

__global__ void GdnGatesKernel(const __half* __restrict__ b, const __half* __restrict__ a,
                               const float* __restrict__ a_log, const float* __restrict__ dt_bias, float* beta,
                               float* g, int64_t n, int64_t Hv) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  GdnGateValues(b, a, a_log, dt_bias, i, i % Hv, beta[i], g[i]);
}

constexpr int kWarps = 4;  // each owns a quarter of the key rows
constexpr int kCols = 32;  // value columns per block, one per lane

// What a block of the recurrent kernels shares for one token: q and k of its key head as FP32
// (their norms taken by DeltaRuleToken) and the warps' partial sums.
template <int kDk>
struct DeltaShared {
  float qs[kDk], ks[kDk];
  float part[kWarps][kCols];
  float norms[2];
};

// One token's step of a block's state columns: thread (warp w, lane l) holds state rows
// [w·dk/4, (w+1)·dk/4) of column l in s. Every thread calls it once qs and ks are in shared memory
// (and visible); v is the lane's value, decay = exp(g), b = β. Decay, the memory read S·k, the
// delta update and the output S·q, the last two summed over the four warps through shared memory;
// returns the output of the lane's column in warp 0 (the others' return is not it). On return
// every thread has read everything of `sh` it needs.
template <int kDk>
__device__ __forceinline__ float DeltaRuleToken(float (&s)[kDk / kWarps], DeltaShared<kDk>& sh, float v, float decay,
                                                float b, int warp, int lane) {
  constexpr int kRows = kDk / kWarps;
  if (warp < 2) {  // warp 0 sums q's squares, warp 1 k's
    const float* x = warp == 0 ? sh.qs : sh.ks;
    float ss = 0;
    for (int i = lane; i < kDk; i += kWarp) ss += x[i] * x[i];
    ss = WarpSum(ss);
    if (lane == 0) sh.norms[warp] = rsqrtf(ss + 1e-6f);
  }
  __syncthreads();
  const float qn = sh.norms[0] * rsqrtf(static_cast<float>(kDk)), kn = sh.norms[1];
  float mem = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] *= decay;
    mem += s[r] * sh.ks[warp * kRows + r] * kn;
  }
  sh.part[warp][lane] = mem;
  __syncthreads();
  mem = sh.part[0][lane] + sh.part[1][lane] + sh.part[2][lane] + sh.part[3][lane];
  const float delta = b * (v - mem);
  float out = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] += sh.ks[warp * kRows + r] * kn * delta;
    out += s[r] * sh.qs[warp * kRows + r] * qn;
  }
  __syncthreads();  // everyone has read part before it is reused
  sh.part[warp][lane] = out;
  __syncthreads();
  return sh.part[0][lane] + sh.part[1][lane] + sh.part[2][lane] + sh.part[3][lane];
}

// A recurrent block's place: its value head j and key head kh, the thread's warp and lane, and the
// lane's value column (live where it is below dv).
struct DeltaBlock {
  int warp, lane;
  int64_t j, kh, col;
  bool live;
  static __device__ __forceinline__ DeltaBlock Here(int64_t Hk, int64_t Hv, int64_t dv) {
    const int lane = threadIdx.x % kWarp;
    const int64_t j = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * kCols + lane;
    return {static_cast<int>(threadIdx.x / kWarp), lane, j, j / (Hv / Hk), col, col < dv};
  }
};

// The block's state columns of value head j in registers: thread (warp w, lane) holds rows
// [w·dk/4, (w+1)·dk/4) of column col (zeros where col is past dv, and nothing stored back there).
template <int kDk>
__device__ __forceinline__ void LoadStateColumns(float (&s)[kDk / kWarps], const float* state, int64_t j, int64_t dv,
                                                 int64_t col, int warp) {
  constexpr int kRows = kDk / kWarps;
  const float* S = state + j * kDk * dv;
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = col < dv ? S[(warp * kRows + r) * dv + col] : 0.0f;
}
template <int kDk>
__device__ __forceinline__ void StoreStateColumns(const float (&s)[kDk / kWarps], float* state, int64_t j, int64_t dv,
                                                  int64_t col, int warp) {
  constexpr int kRows = kDk / kWarps;
  float* S = state + j * kDk * dv;
  if (col >= dv) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) S[(warp * kRows + r) * dv + col] = s[r];
}

// Block (value head j, 32 value columns): the state columns stay in registers for the whole call,
// so the state is read and written once however many tokens there are.
template <int kDk>
__global__ void __launch_bounds__(kWarps * kWarp)
    GdnDeltaRuleKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                       float* state, __half* __restrict__ o, int64_t T, int64_t Hk, int64_t Hv, int64_t dv) {
  constexpr int kRows = kDk / kWarps;
  __shared__ DeltaShared<kDk> sh;
  const auto [warp, lane, j, kh, col, live] = DeltaBlock::Here(Hk, Hv, dv);
  const int64_t width = 2 * Hk * kDk + Hv * dv;
  float s[kRows];
  LoadStateColumns<kDk>(s, state, j, dv, col, warp);
  for (int64_t t = 0; t < T; ++t) {
    const __half* row = qkv + t * width;
    for (int i = threadIdx.x; i < kDk; i += blockDim.x) {
      sh.qs[i] = __half2float(row[kh * kDk + i]);
      sh.ks[i] = __half2float(row[Hk * kDk + kh * kDk + i]);
    }
    __syncthreads();
    const float v = live ? __half2float(row[2 * Hk * kDk + j * dv + col]) : 0.0f;
    const float out = DeltaRuleToken<kDk>(s, sh, v, expf(g[t * Hv + j]), beta[t * Hv + j], warp, lane);
    if (warp == 0 && live) o[t * Hv * dv + j * dv + col] = __float2half(out);
    __syncthreads();  // part, qs and ks are rewritten for the next token
  }
  StoreStateColumns<kDk>(s, state, j, dv, col, warp);
}

// The whole mixer of one token (GdnMixer): block (value head j, 32 value columns) as
// GdnDeltaRuleKernel, which first makes the conv outputs it reads (its key head's q and k, its
// columns of v: Conv4Tap from the conv history and the raw projection, rounded to FP16 where the
// conv's output is stored) and its head's gates. The conv history of its v channels it rewrites
// itself; its key head's q and k channels are read by the Hv/Hk · gridDim.y blocks of that key
// head, so the last of them to have read (an arrival counter per key head, reset by that block)
// rewrites those. Each block stores its columns of o (FP16) in scratch; the last of a head's blocks
// to arrive normalizes the head (GatedRmsNormGroup) into y. Counters: Hk + Hv ints, zero between
// calls.
template <int kDk>
__global__ void __launch_bounds__(kWarps * kWarp)
    GdnMixerKernel(const __half* __restrict__ raw, const __half* __restrict__ z, const __half* __restrict__ b,
                   const __half* __restrict__ a, GdnMixerParams p, __half* conv_state, float* state, __half* o,
                   __half* __restrict__ y, int* arrivals, int64_t Hk, int64_t Hv, int64_t dv) {
  constexpr int kRows = kDk / kWarps, kHist = kConv4Taps - 1;
  __shared__ DeltaShared<kDk> sh;
  __shared__ float vs[kCols];
  __shared__ bool last;
  const auto [warp, lane, j, kh, col, live] = DeltaBlock::Here(Hk, Hv, dv);
  const int64_t C = 2 * Hk * kDk + Hv * dv;
  float s[kRows];
  LoadStateColumns<kDk>(s, state, j, dv, col, warp);

  // Channel c's conv output, with its history rows (oldest first) and input as read.
  auto conv = [&](int64_t c, float (&hist)[kHist], float& in) {
    float w[kConv4Taps];
#pragma unroll
    for (int k = 0; k < kConv4Taps; ++k) w[k] = __half2float(p.conv_w[c * kConv4Taps + k]);
#pragma unroll
    for (int k = 0; k < kHist; ++k) hist[k] = __half2float(conv_state[k * C + c]);
    in = __half2float(raw[c]);
    return __half2float(__float2half(Conv4Tap(w, hist, in)));
  };
  for (int i = threadIdx.x; i < 2 * kDk; i += blockDim.x) {
    const int64_t c = i < kDk ? kh * kDk + i : Hk * kDk + kh * kDk + (i - kDk);
    float hist[kHist], in;
    (i < kDk ? sh.qs[i] : sh.ks[i - kDk]) = conv(c, hist, in);
  }
  if (warp == 0 && live) {  // this block's v channel: only it reads and rewrites the history
    const int64_t c = 2 * Hk * kDk + j * dv + col;
    float hist[kHist], in;
    vs[lane] = conv(c, hist, in);
    conv_state[c] = __float2half(hist[1]);
    conv_state[C + c] = __float2half(hist[2]);
    conv_state[2 * C + c] = __float2half(in);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // every read of the key head's history is done: count this block
    __threadfence();
    const int blocks = static_cast<int>(Hv / Hk) * gridDim.y;
    last = atomicAdd(&arrivals[kh], 1) == blocks - 1;
    if (last) arrivals[kh] = 0;
  }
  __syncthreads();
  if (last) {
    for (int i = threadIdx.x; i < 2 * kDk; i += blockDim.x) {
      const int64_t c = i < kDk ? kh * kDk + i : Hk * kDk + kh * kDk + (i - kDk);
      const __half h1 = conv_state[C + c], h2 = conv_state[2 * C + c], in = raw[c];
      conv_state[c] = h1;
      conv_state[C + c] = h2;
      conv_state[2 * C + c] = in;
    }
  }

  float beta, g;
  GdnGateValues(b, a, p.a_log, p.dt_bias, j, j, beta, g);
  const float v = live ? vs[lane] : 0.0f;
  const float out = DeltaRuleToken<kDk>(s, sh, v, expf(g), beta, warp, lane);
  if (warp == 0 && live) o[j * dv + col] = __float2half(out);
  StoreStateColumns<kDk>(s, state, j, dv, col, warp);
  __threadfence();  // each lane's o before the count that lets another block read it
  __syncthreads();
  if (threadIdx.x == 0) {  // this block's columns of o are stored: count it
    last = atomicAdd(&arrivals[Hk + j], 1) == static_cast<int>(gridDim.y) - 1;
    if (last) {
      arrivals[Hk + j] = 0;
      __threadfence();  // the other blocks' o is read after their counts
    }
  }
  __syncthreads();
  if (last && warp == 0) {
    GatedRmsNormGroup</*kPastL1=*/true>(o + j * dv, z + j * dv, p.norm_w, y + j * dv, dv, p.eps, p.sigmoid_gate, lane);
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

template <int kDk>
void LaunchGdnMixer(const __half* raw, const __half* z, const __half* b, const __half* a, const GdnMixerParams& p,
                    __half* conv_state, float* state, __half* o, __half* y, int* arrivals, int64_t Hk, int64_t Hv,
                    int64_t dv, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(CeilDiv(dv, kCols)));
  GdnMixerKernel<kDk><<<grid, kWarps * kWarp, 0, stream>>>(raw, z, b, a, p, conv_state, state, o, y, arrivals, Hk, Hv,
                                                           dv);
}

}  // namespace

bool GdnMixerFits(int64_t key_heads, int64_t value_heads, int64_t key_dim) {
  return (key_dim == 16 || key_dim == 32 || key_dim == 64 || key_dim == 128) && key_heads >= 1 &&
         value_heads % key_heads == 0;
}

void GdnMixer(const __half* raw, const __half* z, const __half* b, const __half* a, const GdnMixerParams& p,
              __half* conv_state, float* state, __half* o, __half* y, int* arrivals, int64_t key_heads,
              int64_t value_heads, int64_t key_dim, int64_t value_dim, cudaStream_t stream) {
  CHECK(GdnMixerFits(key_heads, value_heads, key_dim)) << "GdnMixer: Hk " << key_heads << " Hv " << value_heads
                                                       << " dk " << key_dim;
  switch (key_dim) {
#define Q38_GDN_MIXER(D)                                                                                          \
  case D:                                                                                                         \
    LaunchGdnMixer<D>(raw, z, b, a, p, conv_state, state, o, y, arrivals, key_heads, value_heads, value_dim, stream); \
    break;
    Q38_GDN_MIXER(16)
    Q38_GDN_MIXER(32)
    Q38_GDN_MIXER(64)
    Q38_GDN_MIXER(128)
#undef Q38_GDN_MIXER
  }
  Q38_CUDA_LAUNCHED();
}

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
