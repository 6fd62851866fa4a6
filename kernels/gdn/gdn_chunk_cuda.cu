#include <mma.h>

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

  // Into dst [C][ld], 16 bytes a store (dst and ld keep every row 16-byte aligned).
  __device__ __forceinline__ void Store(__half* dst, int ld) const {
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int idx = threadIdx.x + n * kThreads, i = idx / (kDk / 8), c = idx % (kDk / 8) * 8;
      if (idx >= kVecs) break;
      *reinterpret_cast<uint4*>(dst + i * ld + c) = u[n];
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

// The state kernel's products run on WMMA with FP16 inputs and FP32 sums. Its FP32 operands (the
// state S and Δ) enter as two FP16 parts, x ≈ hi + lo·2⁻¹¹ with hi = fp16(x) and lo =
// fp16((x − hi)·2¹¹), and a product as two (K·hi and K·lo, the second scaled back): 22 of FP32's
// 24 significant bits, where one FP16 part would keep 11. K and Q enter raw (their FP16 rows are
// exact); their norms scale the products' rows afterwards.
constexpr float kLoScale = 2048.0f;

__device__ __forceinline__ void SplitHalves(float x, __half* hi, __half* lo) {
  const __half h = __float2half_rn(x);
  *hi = h;
  *lo = __float2half_rn((x - __half2float(h)) * kLoScale);
}

// Warps of a state block: one a 16×16 tile of the block's state slice [dk × 32 columns], whose
// accumulator fragment holds that tile between chunks.
template <int kDk>
constexpr int kStateWarps = kDk / 8;

// K S and Q S split their dk-long sums over this many warps at the model's dk (16 warps, 8 tiles).
template <int kDk>
constexpr int kKSplit = kStateWarps<kDk> >= 16 ? 2 : 1;

// The state kernel's shared memory: leading dimensions (halves a multiple of 8, floats of 4, so
// that every WMMA tile starts 32 bytes aligned) and the byte offsets of its arrays, in order.
template <int kDk>
struct StateSmem {
  static constexpr int kLdH = kDk + 8, kLdS = kCols + 8, kLdF = kCols + 4, kLd1 = kGdnChunk + 1;
  // raw q and k rows [C][kLdH] half; S as matrix_b, hi and lo [dk][kLdS] half
  static constexpr int kQh = 0, kKh = kQh + kGdnChunk * kLdH * 2, kShi = kKh + kGdnChunk * kLdH * 2,
                       kSlo = kShi + kDk * kLdS * 2;
  // S staged as FP32 [dk][kLdF] at a chunk's start, then K S and Q S partial sums [split][2][C][kLdF]
  static constexpr int kSfFloats = kDk * kLdF, kKqFloats = kKSplit<kDk> * 2 * kGdnChunk * kLdF;
  static constexpr int kU = kSlo + kDk * kLdS * 2;
  // T and P [C][kLd1], R and Δ [C][kLd1], Δ' as matrix_b hi and lo [C][kLdS] half, e^Γ, β,
  // e^{Γlast−Γ} and the q and k norms [C]
  static constexpr int kT = kU + (kSfFloats > kKqFloats ? kSfFloats : kKqFloats) * 4, kP = kT + kGdnChunk * kLd1 * 4,
                       kR = kP + kGdnChunk * kLd1 * 4, kD = kR + kGdnChunk * kLd1 * 4, kDhi = kD + kGdnChunk * kLd1 * 4,
                       kDlo = kDhi + kGdnChunk * kLdS * 2, kVec = kDlo + kGdnChunk * kLdS * 2;
  static constexpr int kBytes = kVec + 5 * kGdnChunk * 4;
  static_assert(kQh % 32 == 0 && kKh % 32 == 0 && kShi % 32 == 0 && kSlo % 32 == 0 && kU % 32 == 0 &&
                    kDhi % 32 == 0 && kDlo % 32 == 0,
                "WMMA tiles start 32 bytes aligned");
};

// The chunks in order, the state carried between them: block (value head j, 32 value columns),
// warp w holding the state tile (rows 16·(w/2), columns 16·(w%2)) in an accumulator fragment.
// Per chunk, with T and P from the prep and K̂ = diag(kn) K, Q̂ = diag(qn) Q,
//   R = diag(β)(V − e^Γ K̂ S₀),  Δ = T R,  O = e^Γ Q̂ S₀ + P Δ,
//   S = e^{Γlast} S₀ + K̂ᵀ diag(e^{Γlast−Γ}) Δ:
// K S₀, Q S₀ and the state's update on WMMA (above), T R and P Δ in FP32 on a (chunk row, column)
// per thread. The next chunk's rows, tiles and values are loaded into registers while this one
// computes. Every exponent is ≤ 0.
template <int kDk>
__global__ void __launch_bounds__(kStateWarps<kDk> * kWarp, 2)
    GdnChunkStateKernel(const __half* __restrict__ qkv, const float* __restrict__ beta, const float* __restrict__ g,
                        const float* __restrict__ tp, float* state, __half* __restrict__ o, int64_t T, int64_t Hk,
                        int64_t Hv, int64_t dv) {
  using L = StateSmem<kDk>;
  constexpr int kW = kStateWarps<kDk>, kThreads = kW * kWarp, kSplit = kKSplit<kDk>;
  constexpr int kPer = kGdnChunk / kW, kTilePer = 2 * kTile / kThreads;
  static_assert(2 * kTile % kThreads == 0 && kGdnChunk % kW == 0, "the tiles and chunk rows split evenly");
  extern __shared__ __align__(128) unsigned char smem[];
  __half* Qh = reinterpret_cast<__half*>(smem + L::kQh);
  __half* Kh = reinterpret_cast<__half*>(smem + L::kKh);
  __half* Shi = reinterpret_cast<__half*>(smem + L::kShi);
  __half* Slo = reinterpret_cast<__half*>(smem + L::kSlo);
  float* Sf = reinterpret_cast<float*>(smem + L::kU);  // the S stage and the K S, Q S sums share it
  float* Kq = Sf;
  float* Tm = reinterpret_cast<float*>(smem + L::kT);
  float* Pm = reinterpret_cast<float*>(smem + L::kP);
  float* R = reinterpret_cast<float*>(smem + L::kR);
  float* D = reinterpret_cast<float*>(smem + L::kD);
  __half* Dhi = reinterpret_cast<__half*>(smem + L::kDhi);
  __half* Dlo = reinterpret_cast<__half*>(smem + L::kDlo);
  float* Eg = reinterpret_cast<float*>(smem + L::kVec);
  float* Bt = Eg + kGdnChunk;
  float* Wd = Bt + kGdnChunk;
  float* Qn = Wd + kGdnChunk;
  float* Kn = Qn + kGdnChunk;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int ti = warp / 2, tj = warp % 2;  // the warp's state tile
  // The warp's n-th chunk row for T R and P Δ, whose row i sums i + 1 terms: rows in mirrored
  // pairs (w and 2·kW − 1 − w of each 2·kW), so that every warp sums as many terms as the next
  // (rows w + kW·n left the last warp 48 terms against the first's 18 at kW = 16).
  static_assert(kPer % 2 == 0, "chunk rows in mirrored pairs");
  const auto chunk_row = [warp](int n) { return 2 * kW * (n / 2) + (n % 2 == 0 ? warp : 2 * kW - 1 - warp); };
  const int64_t j = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * kCols + lane;
  const bool live = col < dv;
  const int64_t kh = j / (Hv / Hk), width = 2 * Hk * kDk + Hv * dv, vcol = 2 * Hk * kDk + j * dv + col;
  float* Sg = state + j * kDk * dv;

  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  using RowA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
  using ColA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major>;
  using RowB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
  Acc s;
  for (int e = threadIdx.x; e < kDk * kCols; e += kThreads) {
    const int r = e / kCols, c = e % kCols;
    const int64_t gc = static_cast<int64_t>(blockIdx.y) * kCols + c;
    Sf[r * L::kLdF + c] = gc < dv ? Sg[r * dv + gc] : 0.0f;
  }
  __syncthreads();
  wmma::load_matrix_sync(s, Sf + 16 * ti * L::kLdF + 16 * tj, L::kLdF, wmma::mem_row_major);

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
      const int64_t row = c0 + chunk_row(n);
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
    q.Store(Qh, L::kLdH);
    k.Store(Kh, L::kLdH);
#pragma unroll
    for (int n = 0; n < kTilePer; ++n) {
      const int idx = threadIdx.x + n * kThreads, r = idx % kTile;
      (idx < kTile ? Tm : Pm)[r / kGdnChunk * L::kLd1 + r % kGdnChunk] = tiles[n];
    }
    if (warp == 0) {
      const float cum = WarpPrefixSum(gl, lane);
      Eg[lane] = expf(cum);
      Bt[lane] = bl;
      Wd[lane] = expf(__shfl_sync(0xffffffffu, cum, kGdnChunk - 1) - cum);
    }
    // The warp's state tile through its own part of the stage into S's two halves.
    {
      float* tile = Sf + 16 * ti * L::kLdF + 16 * tj;
      wmma::store_matrix_sync(tile, s, L::kLdF, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += kWarp) {
        const int r = 16 * ti + e / 16, c = 16 * tj + e % 16;
        SplitHalves(tile[e / 16 * L::kLdF + e % 16], &Shi[r * L::kLdS + c], &Slo[r * L::kLdS + c]);
      }
    }
    float vc[kPer];
#pragma unroll
    for (int n = 0; n < kPer; ++n) vc[n] = v[n];
    __syncthreads();
    if (chunk + 1 < chunks) load(chunk + 1);
    // The rows' norms, summed as the prep sums them (the same FP16 rows), so P agrees bit for bit.
    for (int i = warp; i < kGdnChunk; i += kW) {
      const float qn = QNorm(RowSumSquares(Qh + i * L::kLdH, kDk, lane), kDk);
      const float kn = KNorm(RowSumSquares(Kh + i * L::kLdH, kDk, lane));
      if (lane == 0) {
        Qn[i] = qn;
        Kn[i] = kn;
      }
    }
    // K S₀ and Q S₀, [C × 32] each: 8 tiles, each summed over dk / kSplit rows of S by one warp.
    for (int item = warp; item < 8 * kSplit; item += kW) {
      const int f = item % 8, h = item / 8, which = f / 4, fi = f % 4 / 2, fj = f % 2;
      const __half* a = (which == 0 ? Kh : Qh) + 16 * fi * L::kLdH;
      Acc hi, lo;
      wmma::fill_fragment(hi, 0.0f);
      wmma::fill_fragment(lo, 0.0f);
#pragma unroll
      for (int k0 = h * kDk / kSplit; k0 < (h + 1) * kDk / kSplit; k0 += 16) {
        RowA fa;
        RowB bh, bl2;
        wmma::load_matrix_sync(fa, a + k0, L::kLdH);
        wmma::load_matrix_sync(bh, Shi + k0 * L::kLdS + 16 * fj, L::kLdS);
        wmma::load_matrix_sync(bl2, Slo + k0 * L::kLdS + 16 * fj, L::kLdS);
        wmma::mma_sync(hi, fa, bh, hi);
        wmma::mma_sync(lo, fa, bl2, lo);
      }
#pragma unroll
      for (int e = 0; e < hi.num_elements; ++e) hi.x[e] += lo.x[e] * (1.0f / kLoScale);
      wmma::store_matrix_sync(Kq + ((h * 2 + which) * kGdnChunk + 16 * fi) * L::kLdF + 16 * fj, hi, L::kLdF,
                              wmma::mem_row_major);
    }
    __syncthreads();
    // R into R, e^Γ Q̂ S₀ kept: thread (w, lane) takes chunk rows chunk_row(n), column lane.
    float qs[kPer];
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = chunk_row(n);
      float ks = 0, qq = 0;
#pragma unroll
      for (int h = 0; h < kSplit; ++h) {
        ks += Kq[((h * 2) * kGdnChunk + i) * L::kLdF + lane];
        qq += Kq[((h * 2 + 1) * kGdnChunk + i) * L::kLdF + lane];
      }
      R[i * L::kLd1 + lane] = Bt[i] * (vc[n] - Eg[i] * (Kn[i] * ks));
      qs[n] = Eg[i] * (Qn[i] * qq);
    }
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = chunk_row(n);
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc += Tm[i * L::kLd1 + m] * R[m * L::kLd1 + lane];
      D[i * L::kLd1 + lane] = acc;
    }
    __syncthreads();
    // O, and Δ' = diag(kn e^{Γlast−Γ}) Δ in two halves for the state's update.
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const int i = chunk_row(n);
      float out = qs[n];
      for (int m = 0; m <= i; ++m) out += Pm[i * L::kLd1 + m] * D[m * L::kLd1 + lane];
      if (c0 + i < T && live) o[(c0 + i) * Hv * dv + j * dv + col] = __float2half(out);
      SplitHalves(Wd[i] * Kn[i] * D[i * L::kLd1 + lane], &Dhi[i * L::kLdS + lane], &Dlo[i * L::kLdS + lane]);
    }
    __syncthreads();
    // S = e^{Γlast} S₀ + Kᵀ Δ': the tile's rows of Kᵀ are columns of the raw k rows.
    {
      Acc hi, lo;
      wmma::fill_fragment(hi, 0.0f);
      wmma::fill_fragment(lo, 0.0f);
#pragma unroll
      for (int m0 = 0; m0 < kGdnChunk; m0 += 16) {
        ColA fa;
        RowB bh, bl2;
        wmma::load_matrix_sync(fa, Kh + 16 * ti + m0 * L::kLdH, L::kLdH);
        wmma::load_matrix_sync(bh, Dhi + m0 * L::kLdS + 16 * tj, L::kLdS);
        wmma::load_matrix_sync(bl2, Dlo + m0 * L::kLdS + 16 * tj, L::kLdS);
        wmma::mma_sync(hi, fa, bh, hi);
        wmma::mma_sync(lo, fa, bl2, lo);
      }
      const float last = Eg[kGdnChunk - 1];
#pragma unroll
      for (int e = 0; e < s.num_elements; ++e) s.x[e] = last * s.x[e] + (hi.x[e] + lo.x[e] * (1.0f / kLoScale));
    }
    __syncthreads();  // the next chunk restages everything
  }
  wmma::store_matrix_sync(Sf + 16 * ti * L::kLdF + 16 * tj, s, L::kLdF, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kDk * kCols; e += kThreads) {
    const int r = e / kCols, c = e % kCols;
    const int64_t gc = static_cast<int64_t>(blockIdx.y) * kCols + c;
    if (gc < dv) Sg[r * dv + gc] = Sf[r * L::kLdF + c];
  }
}

}  // namespace

template <int kDk>
void LaunchGdnChunked(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
                      int64_t T, int64_t Hk, int64_t Hv, int64_t dv, cudaStream_t stream) {
  GdnChunkPrepKernel<kDk><<<dim3(static_cast<unsigned>(CeilDiv(T, kGdnChunk)), static_cast<unsigned>(Hk)),
                            kPrepWarps * kWarp, 0, stream>>>(qkv, beta, g, scratch, T, Hk, Hv, dv);
  constexpr int bytes = StateSmem<kDk>::kBytes;
  // dk = 128 needs 77 KB, past the 48 KB a block gets without asking (SM70 allows up to 96 KB).
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
