#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
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

constexpr int kChunk = 32;  // tokens per chunk of the chunked form: one per lane in the scan

// Floats of the chunked kernel's shared memory: the state tile [dk][33], normalized q and k
// [C][dk+1], A and P [C][C+1], the chunk's deltas [C][33], and g / β / decay-to-end [C] each.
// The +1 columns keep the column-wise reads free of bank conflicts.
constexpr int64_t ChunkSmemFloats(int64_t dk) {
  return dk * (kCols + 1) + 2 * kChunk * (dk + 1) + 2 * kChunk * (kChunk + 1) + kChunk * (kCols + 1) + 3 * kChunk;
}

// The chunked form of the same delta rule (docs/model.md §7.5; the CPU's GdnChunked), for prefill: per
// chunk of C tokens with in-chunk cumulative log-decay Γ (all exponents below are ≤ 0),
//   A_ij = β_i e^{Γi−Γj} k_i·k_j (j < i),  P_ij = e^{Γi−Γj} q_i·k_j (j ≤ i),
//   (I + A) Δ = diag(β) (V − e^Γ K S₀)      by forward substitution,
//   O = e^Γ Q S₀ + P Δ,   S = e^{Γlast} S₀ + Kᵀ diag(e^{Γlast−Γ}) Δ,
// so the state is touched once per chunk instead of once per token. Block and state tile as in
// GdnDeltaRuleKernel, but the tile lives in shared memory; FP32 throughout.
template <int kDk>
__global__ void __launch_bounds__(kWarps * kWarp)
    GdnChunkKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                   float* state, __half* __restrict__ o, int64_t T, int64_t Hk, int64_t Hv, int64_t dv) {
  constexpr int kLd = kDk + 1, kRowsPerWarp = kDk / kWarps, kPerThread = kChunk * kCols / (kWarps * kWarp);
  static_assert(kChunk == kWarp, "the Γ scan and the forward solve give each chunk row a lane");
  static_assert(kDk % kWarps == 0 && kChunk * kCols % (kWarps * kWarp) == 0, "rows and columns split evenly");
  extern __shared__ float smem[];
  float* S = smem;                         // [kDk][kCols + 1]
  float* Qs = S + kDk * (kCols + 1);       // [kChunk][kLd]
  float* Ks = Qs + kChunk * kLd;           // [kChunk][kLd]
  float* A = Ks + kChunk * kLd;            // [kChunk][kChunk + 1]
  float* P = A + kChunk * (kChunk + 1);    // [kChunk][kChunk + 1]
  float* D = P + kChunk * (kChunk + 1);    // [kChunk][kCols + 1]
  float* G = D + kChunk * (kCols + 1);     // [kChunk]
  float* B = G + kChunk;                   // [kChunk]
  float* Wd = B + kChunk;                  // [kChunk]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t j = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * kCols + lane;
  const bool live = col < dv;
  const int64_t kh = j / (Hv / Hk), width = 2 * Hk * kDk + Hv * dv;
  float* Sg = state + j * kDk * dv;
  for (int r = warp; r < kDk; r += kWarps) S[r * (kCols + 1) + lane] = live ? Sg[r * dv + col] : 0.0f;
  const float q_scale = rsqrtf(static_cast<float>(kDk));
  for (int64_t c0 = 0; c0 < T; c0 += kChunk) {
    // Load the chunk; rows past T are zero with g = β = 0, so they change nothing.
    for (int idx = threadIdx.x; idx < kChunk * kDk; idx += blockDim.x) {
      const int i = idx / kDk, c = idx % kDk;
      const bool in = c0 + i < T;
      const __half* row = qkv + (in ? c0 + i : 0) * width;
      Qs[i * kLd + c] = in ? __half2float(row[kh * kDk + c]) : 0.0f;
      Ks[i * kLd + c] = in ? __half2float(row[Hk * kDk + kh * kDk + c]) : 0.0f;
    }
    if (threadIdx.x < kChunk) {
      const bool in = c0 + threadIdx.x < T;
      G[threadIdx.x] = in ? g[(c0 + threadIdx.x) * Hv + j] : 0.0f;
      B[threadIdx.x] = in ? beta[(c0 + threadIdx.x) * Hv + j] : 0.0f;
    }
    __syncthreads();
    // L2-normalize q and k, a warp per row; warp 0 also turns g into Γ by an inclusive scan.
    for (int i = warp; i < kChunk; i += kWarps) {
      float sq = 0, sk = 0;
      for (int c = lane; c < kDk; c += kWarp) {
        sq += Qs[i * kLd + c] * Qs[i * kLd + c];
        sk += Ks[i * kLd + c] * Ks[i * kLd + c];
      }
      const float qn = rsqrtf(WarpSum(sq) + 1e-6f) * q_scale, kn = rsqrtf(WarpSum(sk) + 1e-6f);
      for (int c = lane; c < kDk; c += kWarp) {
        Qs[i * kLd + c] *= qn;
        Ks[i * kLd + c] *= kn;
      }
    }
    if (warp == 0) {
      float cum = G[lane];
      for (int d = 1; d < kWarp; d <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, cum, d);
        if (lane >= d) cum += y;
      }
      G[lane] = cum;
      Wd[lane] = expf(__shfl_sync(0xffffffffu, cum, kChunk - 1) - cum);
    }
    __syncthreads();
    // A and P (lanes run over j), then R = diag(β)(V − e^Γ K S₀) into D and e^Γ Q S₀ kept in
    // registers, for rows i = warp + 4m of this thread's column.
    for (int e = threadIdx.x; e < kChunk * kChunk; e += blockDim.x) {
      const int i = e / kChunk, m = e % kChunk;
      float kk = 0, qk = 0;
      if (m <= i) {
        for (int c = 0; c < kDk; ++c) {
          kk += Ks[i * kLd + c] * Ks[m * kLd + c];
          qk += Qs[i * kLd + c] * Ks[m * kLd + c];
        }
      }
      const float decay = m <= i ? expf(G[i] - G[m]) : 0.0f;
      A[i * (kChunk + 1) + m] = m < i ? B[i] * decay * kk : 0.0f;
      P[i * (kChunk + 1) + m] = decay * qk;
    }
    float qs0[kPerThread];
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int i = warp + kWarps * n;
      float ks = 0, qs = 0;
      for (int r = 0; r < kDk; ++r) {
        ks += Ks[i * kLd + r] * S[r * (kCols + 1) + lane];
        qs += Qs[i * kLd + r] * S[r * (kCols + 1) + lane];
      }
      const bool in = c0 + i < T && live;
      const float v = in ? __half2float(qkv[(c0 + i) * width + 2 * Hk * kDk + j * dv + col]) : 0.0f;
      const float eg = expf(G[i]);
      D[i * (kCols + 1) + lane] = B[i] * (v - eg * ks);
      qs0[n] = eg * qs;
    }
    __syncthreads();
    // (I + A) Δ = R: the rows depend on each other, the columns do not; a lane per column.
    if (warp == 0) {
      float d[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        float x = D[i * (kCols + 1) + lane];
#pragma unroll
        for (int m = 0; m < i; ++m) x -= A[i * (kChunk + 1) + m] * d[m];
        d[i] = x;
        D[i * (kCols + 1) + lane] = x;
      }
    }
    __syncthreads();
    // O = e^Γ Q S₀ + P Δ; then S = e^{Γlast} S₀ + Kᵀ diag(e^{Γlast−Γ}) Δ on the thread's rows.
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int i = warp + kWarps * n;
      float out = qs0[n];
      for (int m = 0; m <= i; ++m) out += P[i * (kChunk + 1) + m] * D[m * (kCols + 1) + lane];
      if (c0 + i < T && live) o[(c0 + i) * Hv * dv + j * dv + col] = __float2half(out);
    }
    const float last = expf(G[kChunk - 1]);
    for (int r = warp * kRowsPerWarp; r < (warp + 1) * kRowsPerWarp; ++r) {
      float acc = last * S[r * (kCols + 1) + lane];
      for (int m = 0; m < kChunk; ++m) acc += Wd[m] * Ks[m * kLd + r] * D[m * (kCols + 1) + lane];
      S[r * (kCols + 1) + lane] = acc;
    }
    __syncthreads();  // the next chunk rewrites Qs, Ks, G, B and reads S
  }
  if (live) {
    for (int r = warp; r < kDk; r += kWarps) Sg[r * dv + col] = S[r * (kCols + 1) + lane];
  }
}

template <int kDk>
void LaunchGdn(const __half* qkv, const float* beta, const float* g, float* state, __half* o, int64_t T,
               int64_t Hk, int64_t Hv, int64_t dv, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(CeilDiv(dv, kCols)));
  const dim3 block(kWarps * kWarp);
  if (T < kChunk) {
    GdnDeltaRuleKernel<kDk><<<grid, block, 0, stream>>>(qkv, beta, g, state, o, T, Hk, Hv, dv);
    return;
  }
  constexpr int bytes = static_cast<int>(ChunkSmemFloats(kDk) * sizeof(float));
  // dk = 128 needs 62 KB, past the 48 KB a block gets without asking (SM70 allows up to 96 KB).
  Q38_CUDA_CHECK(cudaFuncSetAttribute(GdnChunkKernel<kDk>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  GdnChunkKernel<kDk><<<grid, block, bytes, stream>>>(qkv, beta, g, state, o, T, Hk, Hv, dv);
}

}  // namespace

void GdnGates(const __half* b, const __half* a, const float* a_log, const float* dt_bias, float* beta, float* g,
              int64_t T, int64_t Hv, cudaStream_t stream) {
  const int64_t n = T * Hv;
  GdnGatesKernel<<<CeilDiv(n, 256), 256, 0, stream>>>(b, a, a_log, dt_bias, beta, g, n, Hv);
  Q38_CUDA_LAUNCHED();
}

void GdnDeltaRule(const __half* qkv, const float* beta, const float* g, float* state, __half* o, int64_t T,
                  int64_t key_heads, int64_t value_heads, int64_t key_dim, int64_t value_dim, cudaStream_t stream) {
  switch (key_dim) {
    case 16:
      LaunchGdn<16>(qkv, beta, g, state, o, T, key_heads, value_heads, value_dim, stream);
      break;
    case 32:
      LaunchGdn<32>(qkv, beta, g, state, o, T, key_heads, value_heads, value_dim, stream);
      break;
    case 64:
      LaunchGdn<64>(qkv, beta, g, state, o, T, key_heads, value_heads, value_dim, stream);
      break;
    case 128:
      LaunchGdn<128>(qkv, beta, g, state, o, T, key_heads, value_heads, value_dim, stream);
      break;
    default:
      LOG(FATAL) << "GDN key_dim " << key_dim << " has no kernel (16, 32, 64, 128)";
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
