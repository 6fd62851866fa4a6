// One token of a GDN layer between its projections in one kernel (gdn_cuda.h, GdnMix): what the
// composition runs as four (CausalConv, GdnGates, GdnDeltaRule, GatedRmsNorm).
#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/gdn/gdn_cuda.h"

namespace q38::cuda {
namespace {

constexpr int kRowWarps = 4;    // each holds a quarter of the state's key rows
constexpr int kMaxDv = 128;     // value columns of a block: a lane each in up to four column warps
constexpr int kMaxThreads = kRowWarps * kMaxDv;

// SiLU(conv) of channel c for this token, from the history rows and x; `next` gets the new
// history (the last K−1 rows of the timeline), which the caller writes when it owns the channel.
__device__ __forceinline__ float ConvChannel(const GdnMixArgs& p, int64_t C, int64_t c, __half* next) {
  const int64_t hist = p.K - 1;
  __half line[kConvMaxHistory + 1];
  for (int64_t u = 0; u < hist; ++u) line[u] = p.conv_state[u * C + c];
  line[hist] = p.qkv[c];
  float acc = 0;
  for (int64_t k = 0; k < p.K; ++k) acc += __half2float(p.conv_w[c * p.K + k]) * __half2float(line[k]);
  for (int64_t u = 0; u < hist; ++u) next[u] = line[u + 1];
  return __half2float(__float2half(Silu(acc)));  // the composition stores the conv's output in FP16
}

// Block = value head j, threads = 4 row warps × ⌈dv/32⌉ column warps; thread (row warp rw, column
// col) keeps state rows [rw·dk/4, (rw+1)·dk/4) of column col in registers, as GdnDeltaRuleKernel.
// The conv of the q and k channels is computed by every value head of the key head; the last of
// them to have read the history (counted in counters[kh]) rewrites it. The v channels are this
// block's alone.
template <int kDk>
__global__ void __launch_bounds__(kMaxThreads) GdnMixKernel(GdnMixArgs p) {
  constexpr int kRows = kDk / kRowWarps;
  __shared__ float xs[2 * kDk + kMaxDv];  // q, k, v of this head after the conv
  __shared__ float part[kRowWarps][kMaxDv];
  __shared__ float ov[kMaxDv];  // the delta rule's output
  __shared__ float scalars[4];  // β, g, 1/|q|·dk^-1/2, 1/|k|
  __shared__ bool last;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int col_warps = static_cast<int>(blockDim.x) / (kRowWarps * kWarp);
  const int rw = warp / col_warps, col = (warp % col_warps) * kWarp + lane;
  const int64_t j = blockIdx.x, kh = j / (p.Hv / p.Hk), dv = p.dv;
  const int64_t C = 2 * p.Hk * kDk + p.Hv * dv;
  const bool live = col < dv;
  // The state's loads go out first; the conv and the gates hide their latency.
  float* S = p.state + j * kDk * dv;
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = live ? S[(rw * kRows + r) * dv + col] : 0.0f;

  const int64_t n = 2 * kDk + dv;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t c = i < kDk ? kh * kDk + i : i < 2 * kDk ? p.Hk * kDk + kh * kDk + (i - kDk) : 2 * p.Hk * kDk + j * dv + (i - 2 * kDk);
    __half next[kConvMaxHistory];
    xs[i] = ConvChannel(p, C, c, next);
    if (i >= 2 * kDk) {
      for (int64_t u = 0; u < p.K - 1; ++u) p.conv_state[u * C + c] = next[u];
    }
  }
  if (threadIdx.x == 0) {
    scalars[0] = Sigmoid(__half2float(p.b[j]));
    scalars[1] = -expf(p.a_log[j]) * Softplus(__half2float(p.a[j]) + p.dt_bias[j]);
  }
  __syncthreads();  // every read of the q and k history of this block is done
  if (threadIdx.x == 0) {
    __threadfence();
    const int heads = static_cast<int>(p.Hv / p.Hk);
    last = atomicAdd(&p.counters[kh], 1) == heads - 1;
    if (last) atomicExch(&p.counters[kh], 0);
  }
  if (warp < 2) {  // L2 norms: warp 0 of q, warp 1 of k
    float ss = 0;
    for (int i = lane; i < kDk; i += kWarp) ss += xs[warp * kDk + i] * xs[warp * kDk + i];
    ss = WarpSum(ss);
    if (lane == 0) scalars[2 + warp] = rsqrtf(ss + 1e-6f) * (warp == 0 ? rsqrtf(static_cast<float>(kDk)) : 1.0f);
  }
  __syncthreads();
  if (last) {  // every value head of kh has read the q and k history: rewrite it
    for (int64_t i = threadIdx.x; i < 2 * kDk; i += blockDim.x) {
      const int64_t c = i < kDk ? kh * kDk + i : p.Hk * kDk + kh * kDk + (i - kDk);
      __half next[kConvMaxHistory];
      ConvChannel(p, C, c, next);
      for (int64_t u = 0; u < p.K - 1; ++u) p.conv_state[u * C + c] = next[u];
    }
  }

  // The delta rule, as GdnDeltaRuleKernel for one token.
  const float beta = scalars[0], decay = expf(scalars[1]), qn = scalars[2], kn = scalars[3];
  const float* q = xs;
  const float* k = xs + kDk;
  float mem = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] *= decay;
    mem += s[r] * k[rw * kRows + r] * kn;
  }
  if (live) part[rw][col] = mem;
  __syncthreads();
  if (live) mem = part[0][col] + part[1][col] + part[2][col] + part[3][col];
  const float delta = live ? beta * (xs[2 * kDk + col] - mem) : 0.0f;
  float out = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] += k[rw * kRows + r] * kn * delta;
    out += s[r] * q[rw * kRows + r] * qn;
  }
  __syncthreads();  // part is read before it is reused
  if (live) part[rw][col] = out;
  __syncthreads();

  // The gated RMS norm over the head's dv outputs, rounded to FP16 first as the composition's o;
  // warp 0 sums the squares in GatedRmsNormKernel's order, so the result is the composition's.
  float o = 0;
  if (rw == 0 && live) {
    o = __half2float(__float2half(part[0][col] + part[1][col] + part[2][col] + part[3][col]));
    ov[col] = o;
  }
  __syncthreads();
  if (warp == 0) {
    float ss = 0;
    for (int64_t i = lane; i < dv; i += kWarp) ss += ov[i] * ov[i];
    ss = WarpSum(ss);
    if (lane == 0) scalars[0] = rsqrtf(ss / dv + p.eps);
  }
  __syncthreads();
  if (rw == 0 && live) {
    const float zv = __half2float(p.z[j * dv + col]);
    const float gate = p.sigmoid_gate ? Sigmoid(zv) : Silu(zv);
    p.y[j * dv + col] = __float2half(o * scalars[0] * __half2float(p.norm[col]) * gate);
  }
  if (live) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) S[(rw * kRows + r) * dv + col] = s[r];
  }
}

}  // namespace

bool GdnMixFits(int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t K) {
  const bool dk_ok = dk == 16 || dk == 32 || dk == 64 || dk == 128;
  return dk_ok && dv >= 1 && dv <= kMaxDv && Hk >= 1 && Hk <= kGdnMixMaxKeyHeads && Hv % Hk == 0 && K >= 1 &&
         K - 1 <= kConvMaxHistory;
}

void GdnMix(const GdnMixArgs& args, cudaStream_t stream) {
  CHECK(GdnMixFits(args.Hk, args.Hv, args.dk, args.dv, args.K))
      << "GdnMix: Hk " << args.Hk << ", Hv " << args.Hv << ", dk " << args.dk << ", dv " << args.dv << ", K " << args.K;
  const dim3 grid(static_cast<unsigned>(args.Hv));
  const dim3 block(static_cast<unsigned>(kRowWarps * kWarp * CeilDiv(args.dv, kWarp)));
  switch (args.dk) {
    case 16:
      GdnMixKernel<16><<<grid, block, 0, stream>>>(args);
      break;
    case 32:
      GdnMixKernel<32><<<grid, block, 0, stream>>>(args);
      break;
    case 64:
      GdnMixKernel<64><<<grid, block, 0, stream>>>(args);
      break;
    default:
      GdnMixKernel<128><<<grid, block, 0, stream>>>(args);
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
