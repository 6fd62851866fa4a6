#include <mma.h>

#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/gdn/gdn_chunk_cuda.h"

namespace q38::cuda {
namespace {

using namespace nvcuda;

constexpr int kPrepWarps = 4;
constexpr int kCols = 32;  // value columns per block of the state kernel, one per lane
constexpr int kTile = kGdnChunk * kGdnChunk;
static_assert(kGdnChunk == kWarp, "the Γ scan and the solve give each chunk row a lane");

// Σx² of a dk-long row, lane-strided then summed over the warp: both kernels normalize q and k
// with it, so the prep's P and the state kernel's Q and K agree bit for bit.
template <typename T>
__device__ __forceinline__ float RowSumSquares(const T* row, int n, int lane) {
  float ss = 0;
  for (int c = lane; c < n; c += kWarp) ss += ToF(row[c]) * ToF(row[c]);
  return WarpSum(ss);
}

__device__ __forceinline__ float QNorm(float ss, int dk) { return rsqrtf(ss + 1e-6f) * rsqrtf(static_cast<float>(dk)); }
__device__ __forceinline__ float KNorm(float ss) { return rsqrtf(ss + 1e-6f); }

// A chunk's rows [0, C) of dk halves at src + i·width (zeros from row `rows` on), held in the
// registers of kThreads threads between their load and their store, 8 halves a thread and step:
// the whole chunk's loads are in flight at once, and the state kernel issues the next chunk's
// while it computes this one.
template <int kDk, int kThreads>
struct ChunkRows {
  static constexpr int kVecs = kGdnChunk * kDk / 8, kPer = (kVecs + kThreads - 1) / kThreads;
  uint4 u[kPer];

  // 16-byte loads where the rows allow them, single halves otherwise.
  __device__ __forceinline__ void Load(const __half* __restrict__ src, int64_t width, int64_t rows) {
    const bool vec = width % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int idx = threadIdx.x + n * kThreads, i = idx / (kDk / 8), c = idx % (kDk / 8) * 8;
      u[n] = make_uint4(0, 0, 0, 0);
      if (idx >= kVecs || i >= rows) continue;
      if (vec) {
        u[n] = *reinterpret_cast<const uint4*>(src + i * width + c);
      } else {
        __half* h = reinterpret_cast<__half*>(&u[n]);
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = src[i * width + c + e];
      }
    }
  }

  // Into dst [C][ld] as FP16 or FP32, 16 bytes a store (dst and ld keep every row 16-byte aligned):
  // eight scalar stores a thread, lanes 8 words apart, met 4-way bank conflicts.
  template <typename Out>
  __device__ __forceinline__ void Store(Out* dst, int ld) const {
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int idx = threadIdx.x + n * kThreads, i = idx / (kDk / 8), c = idx % (kDk / 8) * 8;
      if (idx >= kVecs) break;
      if constexpr (std::is_same_v<Out, __half>) {
        *reinterpret_cast<uint4*>(dst + i * ld + c) = u[n];
      } else {
        const __half2* h = reinterpret_cast<const __half2*>(&u[n]);
        const float2 a = __half22float2(h[0]), b = __half22float2(h[1]), x = __half22float2(h[2]),
                     y = __half22float2(h[3]);
        float4* row = reinterpret_cast<float4*>(dst + i * ld + c);
        row[0] = make_float4(a.x, a.y, b.x, b.y);
        row[1] = make_float4(x.x, x.y, y.x, y.y);
      }
    }
  }
};

// The warp's inclusive prefix sum: Γ, the cumulative log-decay, from each chunk row's g, a lane a row.
__device__ __forceinline__ float WarpPrefixSum(float x, int lane) {
  for (int d = 1; d < kWarp; d <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

// What does not depend on the state, for every chunk at once: block (chunk, key head) forms
// the Gram products K Kᵀ and Q Kᵀ of the raw FP16 rows on WMMA (exact inputs, FP32 sums), then
// a warp per value head of the key head applies the norms and decays in FP32,
//   A_ij = β_i e^{Γi−Γj} k̂_i·k̂_j (j < i),   P_ij = e^{Γi−Γj} q̂_i·k̂_j (j ≤ i),
// and writes T = (I + A)⁻¹ (forward substitution, a lane per column) and P to tp.
template <int kDk>
__global__ void __launch_bounds__(kPrepWarps * kWarp)
    GdnChunkPrepKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                       float* __restrict__ tp, int64_t T, int64_t Hk, int64_t Hv, int64_t dv) {
  constexpr int kLdH = kDk + 8, kLdF = kGdnChunk + 4;  // WMMA leading dimensions, 32-byte rows
  __shared__ __align__(32) __half qh[kGdnChunk][kLdH], kh[kGdnChunk][kLdH];
  __shared__ __align__(32) float kk[kGdnChunk][kLdF], qk[kGdnChunk][kLdF];
  __shared__ float qn[kGdnChunk], kn[kGdnChunk];
  __shared__ float A[kPrepWarps][kGdnChunk][kGdnChunk + 1];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t chunk = blockIdx.x, head = blockIdx.y, c0 = chunk * kGdnChunk;
  const int64_t width = 2 * Hk * kDk + Hv * dv, group = Hv / Hk;
  const __half* rows = qkv + c0 * width + head * kDk;
  ChunkRows<kDk, kPrepWarps * kWarp> q, k;
  q.Load(rows, width, T - c0);
  k.Load(rows + Hk * kDk, width, T - c0);
  q.Store(&qh[0][0], kLdH);
  k.Store(&kh[0][0], kLdH);
  __syncthreads();
  for (int i = warp; i < kGdnChunk; i += kPrepWarps) {
    const float sq = RowSumSquares(qh[i], kDk, lane), sk = RowSumSquares(kh[i], kDk, lane);
    if (lane == 0) {
      qn[i] = QNorm(sq, kDk);
      kn[i] = KNorm(sk);
    }
  }
  {
    const int fi = warp / 2, fj = warp % 2;  // each warp one 16×16 tile of both products
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> akk, aqk;
    wmma::fill_fragment(akk, 0.0f);
    wmma::fill_fragment(aqk, 0.0f);
#pragma unroll
    for (int k0 = 0; k0 < kDk; k0 += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fk, fq;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
      wmma::load_matrix_sync(fk, &kh[16 * fi][k0], kLdH);
      wmma::load_matrix_sync(fq, &qh[16 * fi][k0], kLdH);
      wmma::load_matrix_sync(fb, &kh[16 * fj][k0], kLdH);
      wmma::mma_sync(akk, fk, fb, akk);
      wmma::mma_sync(aqk, fq, fb, aqk);
    }
    wmma::store_matrix_sync(&kk[16 * fi][16 * fj], akk, kLdF, wmma::mem_row_major);
    wmma::store_matrix_sync(&qk[16 * fi][16 * fj], aqk, kLdF, wmma::mem_row_major);
  }
  __syncthreads();
  float(*a)[kGdnChunk + 1] = A[warp];
  for (int64_t v = warp; v < group; v += kPrepWarps) {
    const int64_t j = head * group + v, t = c0 + lane;
    const float cum = WarpPrefixSum(t < T ? g[t * Hv + j] : 0.0f, lane), b = t < T ? beta[t * Hv + j] : 0.0f;
    float* tile = tp + (chunk * Hv + j) * 2 * kTile;
    // Row i across the lanes m.
    for (int i = 0; i < kGdnChunk; ++i) {
      const float gi = __shfl_sync(0xffffffffu, cum, i), bi = __shfl_sync(0xffffffffu, b, i);
      const float decay = lane <= i ? expf(gi - cum) : 0.0f;
      a[i][lane] = lane < i ? bi * decay * kn[i] * kn[lane] * kk[i][lane] : 0.0f;
      tile[kTile + i * kGdnChunk + lane] = decay * qn[i] * kn[lane] * qk[i][lane];
    }
    __syncwarp();
    float x[kGdnChunk];
#pragma unroll
    for (int r = 0; r < kGdnChunk; ++r) {
      float acc = r == lane ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < r; ++m) acc -= a[r][m] * x[m];
      x[r] = acc;
      tile[r * kGdnChunk + lane] = acc;
    }
    __syncwarp();  // a is rewritten for the warp's next value head
  }
}

// Floats of the state kernel's shared memory: the state tile [dk][33], normalized q and k
// [C][dk+4] (float4 rows), T and P [C][C+1], R and then Δ [C][33], e^Γ, β and e^{Γlast−Γ} [C].
constexpr int64_t StateSmemFloats(int64_t dk) {
  return dk * (kCols + 1) + 2 * kGdnChunk * (dk + 4) + 2 * kGdnChunk * (kGdnChunk + 1) +
         kGdnChunk * (kCols + 1) + 3 * kGdnChunk;
}

// Warps of a state block: 16 at the model's dk (two chunk rows and dk/16 state rows a thread,
// so that four warps a scheduler hide each other's shared-memory latency), fewer for small dk,
// whose state rows move as float4. Two blocks an SM, so TP1's 192 blocks run in one wave: at
// dk = 128 that holds a thread to 64 registers, with 64 bytes spilled (8 warps spill nothing but
// were slower at TP2 and TP4, run M2).
template <int kDk>
constexpr int kStateWarps = kDk >= 64 ? 16 : kDk / 4;

// The chunks in order, the state carried between them: block (value head j, 32 value columns);
// thread (warp w of W, lane l) keeps state rows [w·dk/W, (w+1)·dk/W) of column l in registers and
// computes chunk rows i = w + W·n. Per chunk, with T and P from the prep,
//   R = diag(β)(V − e^Γ K S₀),  Δ = T R,  O = e^Γ Q S₀ + P Δ,  S = e^{Γlast} S₀ + Kᵀ diag(e^{Γlast−Γ}) Δ.
// The next chunk's rows, tiles and values are loaded into registers while this one computes.
// Every exponent is ≤ 0; FP32 throughout.
template <int kDk>
__global__ void __launch_bounds__(kStateWarps<kDk> * kWarp, 2)
    GdnChunkStateKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                        const float* __restrict__ tp, float* state, __half* __restrict__ o, int64_t T, int64_t Hk,
                        int64_t Hv, int64_t dv) {
  constexpr int kW = kStateWarps<kDk>, kThreads = kW * kWarp;
  constexpr int kRows = kDk / kW, kLd = kDk + 4, kSld = kCols + 1, kTld = kGdnChunk + 1;
  constexpr int kPer = kGdnChunk / kW, kTilePer = 2 * kTile / kThreads;
  static_assert(kRows % 4 == 0, "state rows move as float4");
  static_assert(2 * kTile % kThreads == 0, "the tiles split evenly");
  extern __shared__ float4 smem4[];
  float* S = reinterpret_cast<float*>(smem4);  // [kDk][kSld]
  float* Qs = S + kDk * kSld;                   // [C][kLd], 16-byte aligned: dk is a multiple of 16
  float* Ks = Qs + kGdnChunk * kLd;             // [C][kLd]
  float* Tm = Ks + kGdnChunk * kLd;             // [C][kTld], then P [C][kTld]
  float* Pm = Tm + kGdnChunk * kTld;
  float* D = Pm + kGdnChunk * kTld;             // [C][kSld]
  float* Eg = D + kGdnChunk * kSld;             // [C]
  float* Bt = Eg + kGdnChunk;                   // [C]
  float* Wd = Bt + kGdnChunk;                   // [C]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t j = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * kCols + lane;
  const bool live = col < dv;
  const int64_t kh = j / (Hv / Hk), width = 2 * Hk * kDk + Hv * dv, vcol = 2 * Hk * kDk + j * dv + col;
  float* Sg = state + j * kDk * dv;
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = live ? Sg[(warp * kRows + r) * dv + col] : 0.0f;

  // A chunk's inputs in registers (rows past T zero, with g = β = 0: they change nothing).
  ChunkRows<kDk, kThreads> q, k;
  float tiles[kTilePer], v[kPer], gl = 0, bl = 0;
  auto load = [&](int64_t chunk) {
    const int64_t c0 = chunk * kGdnChunk, t = c0 + lane;
    const __half* rows = qkv + c0 * width + kh * kDk;
    q.Load(rows, width, T - c0);
    k.Load(rows + Hk * kDk, width, T - c0);
    const float* tile = tp + (chunk * Hv + j) * 2 * kTile;
#pragma unroll
    for (int n = 0; n < kTilePer; ++n) tiles[n] = tile[threadIdx.x + n * kThreads];
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int64_t row = c0 + warp + kW * n;
      v[n] = row < T && live ? __half2float(qkv[row * width + vcol]) : 0.0f;
    }
    if (warp == 0) {
      gl = t < T ? g[t * Hv + j] : 0.0f;
      bl = t < T ? beta[t * Hv + j] : 0.0f;
    }
  };
  const int64_t chunks = CeilDivDevice(T, kGdnChunk);
  load(0);
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t c0 = chunk * kGdnChunk;
    q.Store(Qs, kLd);
    k.Store(Ks, kLd);
#pragma unroll
    for (int n = 0; n < kTilePer; ++n) {
      const int idx = threadIdx.x + n * kThreads, r = idx % kTile;
      Tm[idx / kTile * kGdnChunk * kTld + r / kGdnChunk * kTld + r % kGdnChunk] = tiles[n];
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) S[(warp * kRows + r) * kSld + lane] = s[r];
    if (warp == 0) {
      const float cum = WarpPrefixSum(gl, lane);
      Eg[lane] = expf(cum);
      Bt[lane] = bl;
      Wd[lane] = expf(__shfl_sync(0xffffffffu, cum, kGdnChunk - 1) - cum);
    }
    float vc[kPer];
#pragma unroll
    for (int n = 0; n < kPer; ++n) vc[n] = v[n];
    __syncthreads();
    if (chunk + 1 < chunks) load(chunk + 1);
    for (int i = warp; i < kGdnChunk; i += kW) {
      const float qn = QNorm(RowSumSquares(Qs + i * kLd, kDk, lane), kDk);
      const float kn = KNorm(RowSumSquares(Ks + i * kLd, kDk, lane));
      for (int c = lane; c < kDk; c += kWarp) {
        Qs[i * kLd + c] *= qn;
        Ks[i * kLd + c] *= kn;
      }
    }
    __syncthreads();
    // K S₀ and Q S₀ on the thread's rows; R into D, e^Γ Q S₀ kept.
    float ks[kPer] = {}, qs[kPer] = {};
#pragma unroll 4
    for (int c = 0; c < kDk; c += 4) {
      float sv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) sv[u] = S[(c + u) * kSld + lane];
#pragma unroll
      for (int n = 0; n < kPer; ++n) {
        const int i = warp + kW * n;
        const float4 kq = *reinterpret_cast<const float4*>(Ks + i * kLd + c);
        const float4 qq = *reinterpret_cast<const float4*>(Qs + i * kLd + c);
        ks[n] += kq.x * sv[0] + kq.y * sv[1] + kq.z * sv[2] + kq.w * sv[3];
        qs[n] += qq.x * sv[0] + qq.y * sv[1] + qq.z * sv[2] + qq.w * sv[3];
      }
    }
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = warp + kW * n;
      D[i * kSld + lane] = Bt[i] * (vc[n] - Eg[i] * ks[n]);
      qs[n] *= Eg[i];
    }
    __syncthreads();
    float d[kPer];
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = warp + kW * n;
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc += Tm[i * kTld + m] * D[m * kSld + lane];
      d[n] = acc;
    }
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kPer; ++n) D[(warp + kW * n) * kSld + lane] = d[n];
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = warp + kW * n;
      float out = qs[n];
      for (int m = 0; m <= i; ++m) out += Pm[i * kTld + m] * D[m * kSld + lane];
      if (c0 + i < T && live) o[(c0 + i) * Hv * dv + j * dv + col] = __float2half(out);
    }
    const float last = Eg[kGdnChunk - 1];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] *= last;
#pragma unroll 4
    for (int m = 0; m < kGdnChunk; ++m) {
      const float dm = Wd[m] * D[m * kSld + lane];
#pragma unroll
      for (int r = 0; r < kRows; r += 4) {
        const float4 kv = *reinterpret_cast<const float4*>(Ks + m * kLd + warp * kRows + r);
        s[r] += kv.x * dm;
        s[r + 1] += kv.y * dm;
        s[r + 2] += kv.z * dm;
        s[r + 3] += kv.w * dm;
      }
    }
    __syncthreads();  // the next chunk restages everything
  }
  if (live) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) Sg[(warp * kRows + r) * dv + col] = s[r];
  }
}

}  // namespace

template <int kDk>
void LaunchGdnChunked(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
                      int64_t T, int64_t Hk, int64_t Hv, int64_t dv, cudaStream_t stream) {
  GdnChunkPrepKernel<kDk><<<dim3(static_cast<unsigned>(CeilDiv(T, kGdnChunk)), static_cast<unsigned>(Hk)),
                            kPrepWarps * kWarp, 0, stream>>>(qkv, beta, g, scratch, T, Hk, Hv, dv);
  constexpr int bytes = static_cast<int>(StateSmemFloats(kDk) * sizeof(float));
  // dk = 128 needs 62 KB, past the 48 KB a block gets without asking (SM70 allows up to 96 KB).
  Q38_CUDA_CHECK(cudaFuncSetAttribute(GdnChunkStateKernel<kDk>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(CeilDiv(dv, kCols)));
  GdnChunkStateKernel<kDk><<<grid, kStateWarps<kDk> * kWarp, bytes, stream>>>(qkv, beta, g, scratch, state, o, T, Hk,
                                                                             Hv, dv);
}

#define Q38_GDN_CHUNKED(dk)                                                                                       \
  template void LaunchGdnChunked<dk>(const __half*, const float*, const float*, float*, __half*, float*, int64_t, \
                                     int64_t, int64_t, int64_t, cudaStream_t);
Q38_GDN_CHUNKED(16)
Q38_GDN_CHUNKED(32)
Q38_GDN_CHUNKED(64)
Q38_GDN_CHUNKED(128)
#undef Q38_GDN_CHUNKED

}  // namespace q38::cuda
