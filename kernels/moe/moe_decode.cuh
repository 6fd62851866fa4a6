// The routed experts' decode kernels (T ≤ kPairwiseMaxTokens): one GEMV per (token, expert) pair
// for gate/up with SiLU·up fused, and one for down into FP32 per pair, or one for down that also
// sums the pairs and adds the gated shared expert (DownCombineKernel). In a header so that
// kernels/moe/moe_bench.cu can time each kernel and its row counts apart; moe_cuda.cu launches
// them (RoutedExperts).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_pipeline.cuh"
#include "kernels/linear/linear_gemv.cuh"
#include "kernels/moe/moe_cuda.h"

namespace q38::cuda::moe_decode {

// NVFP4 codes to FP16 with integer operations, two at a time, instead of a table read per code:
// an E2M1 code's magnitude bits (e1 e0 m) placed at FP16 bits 11..9 (the exponent's two low bits
// and the mantissa's top bit) make 2⁻¹⁴ × its value, zero and the subnormal 0.5 included, and its
// sign goes to bit 15. Pair i of a word of eight codes holds code i (low half) and code i + 4.
template <int kPair>
__device__ __forceinline__ __half2 E2m1PairBits(uint32_t c) {
  constexpr int kMag = 9 - 4 * kPair, kSign = 12 - 4 * kPair;
  const uint32_t mag = kMag >= 0 ? c << kMag : c >> -kMag;
  const uint32_t bits = (mag & 0x0E000E00u) | ((c << kSign) & 0x80008000u);
  return *reinterpret_cast<const __half2*>(&bits);
}
template <int kPair>
__device__ __forceinline__ float2 E2m1PairScaled(uint32_t c) {
  return __half22float2(E2m1PairBits<kPair>(c));
}

// E4M3 (FN) to FP32 through FP16 the same way: exponent and mantissa (eeee mmm) at FP16 bits
// 13..7 make 2⁻⁸ × the value, subnormals included; 0x7F/0xFF stay NaN.
__device__ __forceinline__ __half E4m3ScaledHalf(uint32_t b) {
  if ((b & 0x7Fu) == 0x7Fu) return __ushort_as_half(0x7e00);
  return __ushort_as_half(static_cast<unsigned short>(((b & 0x7Fu) << 7) | ((b & 0x80u) << 8)));
}
__device__ __forceinline__ float E4m3Scaled(uint32_t b) { return __half2float(E4m3ScaledHalf(b)); }

// An expert projection's weights as both routes read them. At(e, n) is row n of expert e;
// Load<kCols> reads its columns j..j+kCols-1 (kCols 8 or 16, j a multiple of kCols: four or
// eight bytes of codes and their one block scale) and Dot dots them with kCols FP32 inputs,
// without the per-expert global scale, which Global gives, and scaled by 1/kUnscale (decode).
// Tiles reads runs of 16 columns for prefill's WMMA tiles and writes them as FP16, also without it
// (E2M1 × E4M3 has at most 6 significant bits within FP16's normal range, so it is exact).
// In Dot the codes come as 2⁻¹⁴ and the block scale as 2⁻⁸ times their values. Powers of two
// change no rounding here (every product and partial sum stays a normal FP32), so times kUnscale
// the sum has the bits of the plain Σ code · scale · x in the same order.
struct Nvfp4Rows {
  static constexpr float kUnscale = 0x1p22f;
  const uint8_t* codes;
  const uint8_t* scales;
  const float* global_a;
  const float* global_b;
  int64_t split, N, K;
  static Nvfp4Rows Of(const ExpertProjection& p) {
    return {p.codes, p.scales, p.global_a, p.global_b, p.split, p.N, p.K};
  }
  struct Row {
    const uint8_t* codes;
    const uint8_t* scales;
  };
  template <int kCols>
  struct Run {
    uint32_t c[kCols / 8];
    uint32_t scale;
  };
  __device__ __forceinline__ float Global(int64_t e, int64_t n) const { return n < split ? global_a[e] : global_b[e]; }
  __device__ __forceinline__ Row At(int64_t e, int64_t n) const {
    const int64_t row = e * N + n;
    return {codes + row * (K / 2), scales + row * (K / 16)};
  }
  template <int kCols>
  __device__ __forceinline__ static Run<kCols> Load(const Row& row, int j) {
    Run<kCols> r;
    if constexpr (kCols == 16) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(row.codes + j / 2));
      r.c[0] = v.x, r.c[1] = v.y;
    } else {
      r.c[0] = __ldg(reinterpret_cast<const uint32_t*>(row.codes + j / 2));
    }
    r.scale = __ldg(row.scales + j / 16);
    return r;
  }
  template <int kCols>
  __device__ __forceinline__ static float Dot(const Run<kCols>& r, const float* x) {
    float dot = 0;
#pragma unroll
    for (int w = 0; w < kCols / 8; ++w) {
      const float2 f0 = E2m1PairScaled<0>(r.c[w]), f1 = E2m1PairScaled<1>(r.c[w]), f2 = E2m1PairScaled<2>(r.c[w]),
                   f3 = E2m1PairScaled<3>(r.c[w]);
      const float v[8] = {f0.x, f1.x, f2.x, f3.x, f0.y, f1.y, f2.y, f3.y};  // codes 0..7 in column order
#pragma unroll
      for (int i = 0; i < 8; ++i) dot += v[i] * x[8 * w + i];
    }
    return dot * E4m3Scaled(r.scale);
  }
  // Prefill's tiles: expert e's rows at 32-bit byte offsets into its codes (the launches check
  // that an expert's N·K/2 bytes fit), a run of 16 columns as loaded (8 bytes of codes and their
  // one block scale) and its 16 halves. Offset(n): the byte cursor where row n starts; Fetch(row,
  // k): the run at column k (a multiple of 16) of the row at that cursor. The scales lie at 1/8 of
  // the codes' offsets (K is a multiple of 16).
  struct Tiles {
    struct Run {
      static constexpr int kHalves = 16;
      uint2 c;
      uint32_t scale;
    };
    const uint8_t* codes;
    const uint8_t* scales;
    int64_t K;
    __device__ __forceinline__ int Offset(int64_t n) const { return static_cast<int>(n * (K / 2)); }
    __device__ __forceinline__ Run Fetch(int row, int k) const {
      const uint32_t at = static_cast<uint32_t>(row + k / 2);
      return {__ldg(reinterpret_cast<const uint2*>(codes + at)), __ldg(scales + (at >> 3))};
    }
    // The tile holds code · scale · 2⁻⁷ (kUnscale undoes it in the epilogue): two codes a half2
    // (E2m1PairBits: 2⁻¹⁴ × their values) times the block scale · 2⁷ in FP16, one multiply a pair.
    // Each product is exact: a code has at most 2 significant bits, a scale 4, and 2⁻¹⁷ ≤ |value
    // · 2⁻⁷| ≤ 21 keeps its 6 bits above FP16's smallest subnormal, 2⁻²⁴. Powers of two change no
    // rounding of the FP32 products and sums, so the results have the bits of tiles holding the
    // plain code · scale.
    static constexpr float kUnscale = 0x1p7f;
    __device__ __forceinline__ static void Stash(const Run& r, __half* out) {
      // E4m3ScaledHalf is 2⁻⁸ × the scale; times 2¹⁵ it is the scale · 2⁷ (≤ 448 · 2⁷ < 65,504).
      const __half2 scale = __hmul2(__half2half2(E4m3ScaledHalf(r.scale)), __float2half2_rn(32768.0f));
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        const uint32_t c = w == 0 ? r.c.x : r.c.y;
        const __half2 v[4] = {E2m1PairBits<0>(c), E2m1PairBits<1>(c), E2m1PairBits<2>(c), E2m1PairBits<3>(c)};
        __half2 o[4];  // codes 0..7 in column order: pair p holds codes p and p + 4
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const __half2 lo = __hmul2(v[2 * p], scale), hi = __hmul2(v[2 * p + 1], scale);
          o[p] = __lows2half2(lo, hi);
          o[p + 2] = __highs2half2(lo, hi);
        }
        reinterpret_cast<uint4*>(out)[w] = *reinterpret_cast<const uint4*>(o);
      }
    }
  };
  __device__ __forceinline__ Tiles TilesOf(int64_t e) const {
    return {codes + e * N * (K / 2), scales + e * N * (K / 16), K};
  }
};

struct DenseRows {
  static constexpr float kUnscale = 1.0f;
  const __half* w;
  int64_t N, K;
  static DenseRows Of(const ExpertProjection& p) { return {p.dense, p.N, p.K}; }
  using Row = const __half*;
  template <int kCols>
  struct Run {
    uint4 v[kCols / 8];
  };
  __device__ __forceinline__ float Global(int64_t, int64_t) const { return 1.0f; }
  __device__ __forceinline__ Row At(int64_t e, int64_t n) const { return w + (e * N + n) * K; }
  template <int kCols>
  __device__ __forceinline__ static Run<kCols> Load(Row row, int j) {
    Run<kCols> r;
#pragma unroll
    for (int i = 0; i < kCols / 8; ++i) r.v[i] = __ldg(reinterpret_cast<const uint4*>(row + j) + i);
    return r;
  }
  template <int kCols>
  __device__ __forceinline__ static float Dot(const Run<kCols>& r, const float* x) {
    float dot = 0;
#pragma unroll
    for (int half = 0; half < kCols / 8; ++half) {
      const __half2* h = reinterpret_cast<const __half2*>(&r.v[half]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(h[i]);
        dot += f.x * x[8 * half + 2 * i] + f.y * x[8 * half + 2 * i + 1];
      }
    }
    return dot;
  }
  // Prefill's tiles (Nvfp4Rows::Tiles): the pipeline's FP16 runs, rows at offsets in halves.
  struct Tiles {
    using Run = HalfRun;
    static constexpr float kUnscale = 1.0f;
    const __half* w;
    int64_t K;
    __device__ __forceinline__ int Offset(int64_t n) const { return static_cast<int>(n * K); }
    __device__ __forceinline__ Run Fetch(int row, int k) const { return FetchHalfRun(w, row, k, true); }
    __device__ __forceinline__ static void Stash(const Run& r, __half* out) { StashHalfRun(r, out); }
  };
  __device__ __forceinline__ Tiles TilesOf(int64_t e) const { return {w + e * N * K, K}; }
};

// dot[r] = x (F16 row) · weights row n[r] of expert e, over a group of `group` lanes (a power of
// two up to 32, aligned within the warp): lane l of the group takes kCols columns at kCols·l,
// kCols·(l + group), …, so the group's loads of a row are adjacent; x is read and converted once
// for all kRows rows, and the rows' loads are issued together. With kAhead > 0 a lane issues the
// loads of its first kAhead runs of every row before its first product, so that a short row
// costs one memory round trip; runs past those stream. The sum's order is the same either way.
// Every lane of the warp must call it, with the same group size.
template <int kRows, int kCols, int kAhead, typename Rows>
__device__ __forceinline__ void GroupRowDots(const Rows& rows, int64_t e, const int64_t (&n)[kRows], const __half* x,
                                             int lane, int group, float (&dot)[kRows]) {
  typename Rows::Row at[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) at[r] = rows.At(e, n[r]);
  float acc[kRows] = {};
  const int K = static_cast<int>(rows.K), step = group * kCols;
  int j = lane * kCols;
  if constexpr (kAhead > 0) {
    typename Rows::template Run<kCols> w[kAhead][kRows];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (j + u * step < K) w[u][r] = Rows::template Load<kCols>(at[r], j + u * step);
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (j + u * step < K) {
        float xf[kCols];
#pragma unroll
        for (int i = 0; i < kCols; i += 8) LoadF<8>(x + j + u * step + i, xf + i);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] += Rows::Dot(w[u][r], xf);
      }
    }
    j += kAhead * step;
  }
#pragma unroll 2
  for (; j < K; j += step) {
    float xf[kCols];
#pragma unroll
    for (int i = 0; i < kCols; i += 8) LoadF<8>(x + j + i, xf + i);
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] += Rows::Dot(Rows::template Load<kCols>(at[r], j), xf);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int o = group / 2; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    dot[r] = acc[r] * Rows::kUnscale * rows.Global(e, n[r]);
  }
}

// Lanes per row group: as many as there are kCols-column runs in K, up to a warp, so that a short
// K (a TP slice of I) still keeps most lanes busy.
inline int RowGroupLanes(int64_t K, int cols) {
  int group = 1;
  while (group < kWarp && int64_t{group} * 2 * cols <= K) group *= 2;
  return group;
}

constexpr int kThreads = 256, kGateUpCols = 16, kDownCols = 8;

// Block (pair p = t·k + j on x, a run of intermediate rows on y): each lane group computes kRows
// gate rows i and the up rows I + i of expert idx[p] and writes silu(gate)·up. One row is held to
// 64 registers (4 blocks an SM instead of 3): the kernel issues most cycles, and more warps to
// pick from took a TP1 decode call from 35.7 to 33.9 µs (docs/journal/2026-12-02-runs-u-w.md);
// more rows, or more runs loaded ahead, need more registers than that.
template <typename Rows, int kRows, int kAhead>
__global__ void __launch_bounds__(kThreads, kRows == 1 && kAhead <= 3 ? 4 : 3)
    GateUpKernel(const __half* __restrict__ h, const int32_t* __restrict__ idx, Rows rows, __half* __restrict__ act,
                 int64_t k, int64_t I, int group) {
  const int64_t pair = blockIdx.x, t = pair / k;
  const int lane = threadIdx.x % group;
  const int64_t i0 = ((static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) / group) * kRows;
  int64_t n[2 * kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = i0 + r < I ? i0 + r : I - 1;  // lanes past I repeat the last row: the shuffles need them all
    n[r] = row;
    n[kRows + r] = I + row;
  }
  float dot[2 * kRows];
  GroupRowDots<2 * kRows, kGateUpCols, kAhead>(rows, idx[pair], n, h + t * rows.K, lane, group, dot);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (i0 + r < I) act[pair * I + i0 + r] = __float2half(Silu(dot[r]) * dot[kRows + r]);
  }
}

// Block (pair, rows): each lane group computes kRows output rows n of the down projection, in
// FP32, eight columns a lane step. (At TP1, K = 640, one row a group: four rows with sixteen
// columns took 23 µs a call, one row with sixteen 22.6, a warp a row with eight 20; the short rows
// want more lanes busy rather than more loads in flight per lane.)
template <typename Rows, int kRows, int kAhead>
__global__ void __launch_bounds__(kThreads)
    DownKernel(const __half* __restrict__ act, const int32_t* __restrict__ idx, Rows rows,
               float* __restrict__ pair_out, int group) {
  const int64_t pair = blockIdx.x;
  const int lane = threadIdx.x % group;
  const int64_t n0 = ((static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) / group) * kRows;
  int64_t n[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) n[r] = n0 + r < rows.N ? n0 + r : rows.N - 1;
  float dot[kRows];
  GroupRowDots<kRows, kDownCols, kAhead>(rows, idx[pair], n, act + pair * rows.K, lane, group, dot);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (n0 + r < rows.N) pair_out[pair * rows.N + n0 + r] = dot[r];
  }
}

// act [pairs, I] from h: kRows gate rows (and their up rows) a lane group, kAhead runs of each
// loaded before the first product.
template <typename Rows, int kRows, int kAhead>
void LaunchGateUp(const __half* h, const int32_t* idx, const Rows& gate_up, __half* act, int64_t pairs, int64_t k,
                  cudaStream_t stream) {
  const int64_t I = gate_up.N / 2;
  const int group = RowGroupLanes(gate_up.K, kGateUpCols);
  GateUpKernel<Rows, kRows, kAhead><<<dim3(pairs, CeilDiv(I, kThreads / group * kRows)), kThreads, 0, stream>>>(
      h, idx, gate_up, act, k, I, group);
}

// pair_out [pairs, H] from act, likewise.
template <typename Rows, int kRows, int kAhead>
void LaunchDown(const __half* act, const int32_t* idx, const Rows& down, float* pair_out, int64_t pairs,
                cudaStream_t stream) {
  const int group = RowGroupLanes(down.K, kDownCols);
  DownKernel<Rows, kRows, kAhead><<<dim3(pairs, CeilDiv(down.N, kThreads / group * kRows)), kThreads, 0, stream>>>(
      act, idx, down, pair_out, group);
}

// The chunked down kernel (NVFP4 only): a lane takes whole 16-byte chunks of codes (32 columns
// and their two block scales) and issues all of its kChunks chunks' loads before any arithmetic;
// `lanes` lanes share a row (ChunkLanes), so the lanes of a row read adjacent chunks and a warp's
// load covers 32 / lanes whole rows' stretches. Against the lane groups above (4 bytes a lane a
// load, one scale byte each) a warp keeps 2.5 KB in flight instead of about 1: at K = 640 a TP1
// call takes 7.8 µs against 10.7 (moe_bench, run D2). The same scheme for gate/up (K = 2,560,
// 16 lanes a row) was slower than its lane groups (13.2 µs against 12.7) and is not kept. The
// row's input x sits in shared memory, its 64-byte chunks' four 16-byte pieces rotated by chunk,
// so that the pieces the lanes of a row read at once fall in distinct banks. Sums: each lane
// adds its chunks in order (each chunk as two 16-column dots times their scales), then the row's
// lanes meet by shuffles in a fixed order.
constexpr int kChunkCols = 32, kChunks = 5, kChunkThreads = 256;

// Lanes a row for K columns: the fewest (a power of two) that give no lane more than kChunks
// chunks, or 0 where K is not a multiple of 32 or a warp would not do (the lane groups take those).
inline int ChunkLanes(int64_t K) {
  if (K % kChunkCols != 0) return 0;
  const int64_t chunks = K / kChunkCols;
  for (int lanes = 1; lanes <= kWarp; lanes *= 2) {
    if (chunks <= int64_t{lanes} * kChunks) return lanes;
  }
  return 0;
}

// Piece v (4 floats) of chunk j of x in shared memory, x held as FP32 so that a dot converts
// nothing (a value is converted once a block, not once a row). A 32-column chunk is 8 pieces,
// rotated by chunk, so that the pieces the lanes of a row read at once (chunks q + lanes·u, the
// same v) fall in distinct banks.
__device__ __forceinline__ int XPiece(int j, int v) { return 8 * j + ((v + j) & 7); }

// Eight values of x, columns c..c+7 (c a multiple of 8), into their two pieces.
__device__ __forceinline__ void StashX8(float4* xs, int c, const float* v) {
  const int j = c / kChunkCols, p = c % kChunkCols / 4;
  xs[XPiece(j, p)] = make_float4(v[0], v[1], v[2], v[3]);
  xs[XPiece(j, p + 1)] = make_float4(v[4], v[5], v[6], v[7]);
}

// x [K] (FP16, K a multiple of 32) into shared memory as FP32, by the whole block.
__device__ __forceinline__ void StageX(const __half* x, int K, float4* xs) {
  for (int p = threadIdx.x; p < K / 8; p += blockDim.x) {
    float v[8];
    LoadF<8>(x + 8 * p, v);
    StashX8(xs, 8 * p, v);
  }
}

// One lane's chunks of weight row `row` (a row of the whole projection, -1 for none): chunk
// j = q + lanes·u for u < kChunks, zeros past the row.
struct RowChunks {
  uint4 c[kChunks];
  uint32_t s[kChunks];
};
__device__ __forceinline__ RowChunks LoadRowChunks(const Nvfp4Rows& rows, int64_t row, int q, int lanes) {
  RowChunks r;
  const int chunks = static_cast<int>(rows.K / kChunkCols);
  const int64_t at = row >= 0 ? row : 0;
  const uint4* codes = reinterpret_cast<const uint4*>(rows.codes + at * (rows.K / 2));
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(rows.scales + at * (rows.K / 16));
#pragma unroll
  for (int u = 0; u < kChunks; ++u) {
    const int j = q + lanes * u;
    const bool live = row >= 0 && j < chunks;
    r.c[u] = live ? gemv::LoadStreamed(codes + j) : make_uint4(0, 0, 0, 0);
    r.s[u] = live ? __ldg(scales + j) : 0u;  // zero codes and scales: the chunk adds 0
  }
  return r;
}

// The lane's part of its row's dot with x (scaled by 1/kUnscale, as Nvfp4Rows::Dot).
__device__ __forceinline__ float RowChunksDot(const RowChunks& r, const float4* xs, int q, int lanes, int chunks) {
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kChunks; ++u) {
    const int j = q + lanes * u;
    if (j >= chunks) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float xf[16];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = xs[XPiece(j, 4 * half + i)];
        xf[4 * i] = v.x, xf[4 * i + 1] = v.y, xf[4 * i + 2] = v.z, xf[4 * i + 3] = v.w;
      }
      const Nvfp4Rows::Run<16> run{{half ? r.c[u].z : r.c[u].x, half ? r.c[u].w : r.c[u].y},
                                   half ? r.s[u] >> 8 : r.s[u] & 0xFFu};
      acc += Nvfp4Rows::Dot<16>(run, xf);
    }
  }
  return acc;
}

// Block (pair, 8 warps): warp slot s takes output row n = (warp index)·slots + s, into FP32.
static __global__ void __launch_bounds__(kChunkThreads)
    DownChunkKernel(const __half* __restrict__ act, const int32_t* __restrict__ idx, Nvfp4Rows rows,
                    float* __restrict__ pair_out, int lanes) {
  extern __shared__ float4 xs[];
  const int64_t pair = blockIdx.x, e = idx[pair];
  const int lane = threadIdx.x % kWarp, slots = kWarp / lanes, q = lane % lanes;
  const int64_t n = (static_cast<int64_t>(blockIdx.y) * (kChunkThreads / kWarp) + threadIdx.x / kWarp) * slots + lane / lanes;
  const RowChunks r = LoadRowChunks(rows, n < rows.N ? e * rows.N + n : -1, q, lanes);
  StageX(act + pair * rows.K, static_cast<int>(rows.K), xs);
  __syncthreads();
  float dot = RowChunksDot(r, xs, q, lanes, static_cast<int>(rows.K / kChunkCols));
  for (int o = lanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (q == 0 && n < rows.N) pair_out[pair * rows.N + n] = dot * Nvfp4Rows::kUnscale * rows.Global(e, n);
}

// Whether the chunked down kernel takes a projection: K a multiple of 32 and short enough for a
// warp a row, codes 16-byte and scales 2-byte aligned (rows of K/2 and K/16 bytes keep them so).
inline bool ChunksFit(const Nvfp4Rows& rows) {
  return ChunkLanes(rows.K) >= 1 && reinterpret_cast<uintptr_t>(rows.codes) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(rows.scales) % 2 == 0;
}

inline void LaunchDownChunks(const __half* act, const int32_t* idx, const Nvfp4Rows& down, float* pair_out,
                             int64_t pairs, cudaStream_t stream) {
  const int lanes = ChunkLanes(down.K);
  const int64_t rows_a_block = kChunkThreads / kWarp * (kWarp / lanes);
  DownChunkKernel<<<dim3(pairs, CeilDiv(down.N, rows_a_block)), kChunkThreads, down.K * sizeof(float), stream>>>(
      act, idx, down, pair_out, lanes);
}

// The down kernel that also ends the MoE block at decode (Backend::ExpertsAndShared): block
// (a run of rows_b = 32 / lanes output rows, token t) takes those rows of each of the token's k
// pairs, a warp a pair, as DownChunkKernel takes them, and the same rows of the shared expert's
// dense FP16 down weight [H, Is] on kShared more warps, whose input silu(gate)·up it makes from
// the shared gate/up output while it stages the pairs' inputs. Then thread r of the block sums
// out[t, n] = Σ_j w[t, j] · pair_j[n] in j order, rounds it to FP16 and adds
// sigmoid(gate_logit) · shared[n] (shared rounded to FP16 first), as CombineKernel rounds. The
// per-pair outputs never leave the block, and the shared expert's SiLU·up, its GEMV and the sum
// cost no launch of their own.
constexpr int kDownCombineMaxPairs = 16;

struct SharedDown {
  const __half* gu;  // [T, 2·Is]: gate, then up
  const __half* w;   // [H, Is]
  int Is;
  const __half* gate_logit;  // column 0 of rows gate_stride apart
  int64_t gate_stride;
};

// Warps given to the shared expert and the register cap of a DownCombineKernel instance.
struct DownCombineShape {
  int shared_warps, max_regs;
};

// Dynamic shared memory of a block: the k pairs' inputs and the shared one (FP32), then the sums.
inline size_t DownCombineSharedBytes(int64_t k, int64_t I, int64_t Is, int rows_b) {
  return static_cast<size_t>(k * I + Is + (k + 1) * rows_b) * sizeof(float);
}

// A routed warp's chunks and a shared lane's runs share registers. kMaxRegs caps a thread's
// registers so that several blocks fit an SM: uncapped, 91 registers and 448 threads a block
// allowed one block an SM, and the full-size 320 blocks ran in three waves.
template <int kShared, int kMaxRegs>
__global__ void __maxnreg__(kMaxRegs)
    DownCombineKernel(const __half* __restrict__ act, const int32_t* __restrict__ idx, const __half* __restrict__ wts,
                      Nvfp4Rows rows, SharedDown shared, __half* __restrict__ out, int k, int lanes) {
  extern __shared__ float4 smem[];
  const int I = static_cast<int>(rows.K), H = static_cast<int>(rows.N), Is = shared.Is;
  const int rows_b = kWarp / lanes, G = kShared * kWarp / rows_b;  // G: lanes a shared row
  const int xp = I / 4;                // pieces of a pair's input
  float4* xs = smem;                   // k × xp pieces, each pair's rotated as XPiece rotates them
  float4* sx = xs + k * xp;            // Is/4 pieces: the shared expert's silu(gate)·up, in order
  float* part = reinterpret_cast<float*>(sx + Is / 4);  // [k][rows_b]
  float* sh = part + k * rows_b;                        // [rows_b]
  const int64_t t = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n0 = blockIdx.x * rows_b;

  // The weight loads go out first: a routed warp's chunks, or a shared lane's first runs of 8.
  const bool routed = warp < k;
  const int64_t pair = t * k + (routed ? warp : 0);
  const int64_t e = idx[pair];
  const int rn = n0 + lane / lanes;
  const int sflat = routed ? 0 : (warp - k) * kWarp + lane, srow = sflat / G, sq = sflat % G;
  const int sn = routed ? H : n0 + srow;  // routed warps load no shared row
  const int runs = Is / 8;
  const uint4* swrow = reinterpret_cast<const uint4*>(shared.w + static_cast<int64_t>(sn < H ? sn : 0) * Is);
  RowChunks r;  // a shared lane keeps its runs in r.c
  const auto load_shared = [&](int base) {
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int p = base + sq + G * u;
      r.c[u] = sn < H && p < runs ? gemv::LoadStreamed(swrow + p) : make_uint4(0, 0, 0, 0);
    }
  };
  if (routed) {
    r = LoadRowChunks(rows, rn < H ? e * H + rn : -1, lane % lanes, lanes);
  } else {
    load_shared(0);
  }

  // Stage the inputs: the pairs' act rows, the shared one as SiluMulKernel makes it (rounded to
  // FP16), both as FP32.
  for (int p = threadIdx.x; p < k * (I / 8); p += blockDim.x) {
    const int j = p / (I / 8), c = p % (I / 8) * 8;
    float v[8];
    LoadF<8>(act + (t * k + j) * I + c, v);
    StashX8(xs + j * xp, c, v);
  }
  const __half* gu = shared.gu + t * 2 * Is;
  for (int p = threadIdx.x; p < runs; p += blockDim.x) {
    float g[8], u[8], y[8];
    LoadF<8>(gu + 8 * p, g);
    LoadF<8>(gu + Is + 8 * p, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __half2float(__float2half(Silu(g[i]) * u[i]));
    sx[2 * p] = make_float4(y[0], y[1], y[2], y[3]);
    sx[2 * p + 1] = make_float4(y[4], y[5], y[6], y[7]);
  }
  __syncthreads();

  if (routed) {
    float dot = RowChunksDot(r, xs + warp * xp, lane % lanes, lanes, I / kChunkCols);
    for (int o = lanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane % lanes == 0) part[warp * rows_b + lane / lanes] = rn < H ? dot * Nvfp4Rows::kUnscale * rows.Global(e, rn) : 0.0f;
  } else {
    const float* sxf = reinterpret_cast<const float*>(sx);
    float acc = 0;
    for (int base = 0;; base += G * kChunks) {
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int p = base + sq + G * u;
        if (p < runs) {
          float xf[8];
          LoadF<8>(sxf + 8 * p, xf);
          acc += DenseRows::Dot<8>(DenseRows::Run<8>{{r.c[u]}}, xf);
        }
      }
      if (base + G * kChunks >= runs) break;
      load_shared(base + G * kChunks);  // rows longer than one batch: the next one's loads
    }
    for (int o = G / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (sq == 0) sh[srow] = acc;
  }
  __syncthreads();

  if (threadIdx.x < rows_b && n0 + static_cast<int>(threadIdx.x) < H) {
    const int n = n0 + threadIdx.x;
    float acc = 0;
    for (int j = 0; j < k; ++j) acc = __fmaf_rn(__half2float(wts[t * k + j]), part[j * rows_b + threadIdx.x], acc);
    const float s = Sigmoid(__half2float(shared.gate_logit[t * shared.gate_stride]));
    const float sv = __half2float(__float2half(sh[threadIdx.x]));
    out[t * H + n] = __float2half(__fmaf_rn(s, sv, __half2float(__float2half(acc))));
  }
}

// Whether DownCombineKernel takes the shapes: the chunked kernel's rows with 1 to 8 lanes a row
// (so that a shared row has at most a warp's lanes at 4 shared warps), up to kDownCombineMaxPairs
// pairs a token, the inputs within 48 KB of shared memory, 16-byte rows of the shared expert.
inline bool DownCombineFits(const Nvfp4Rows& down, int64_t k, const SharedDown& s) {
  const int lanes = ChunkLanes(down.K);
  return ChunksFit(down) && lanes <= 8 && k >= 1 && k <= kDownCombineMaxPairs && s.Is >= 8 && s.Is % 8 == 0 &&
         DownCombineSharedBytes(k, down.K, s.Is, kWarp / lanes) <= 48 * 1024 &&
         reinterpret_cast<uintptr_t>(s.gu) % 16 == 0 && reinterpret_cast<uintptr_t>(s.w) % 16 == 0;
}

// The instances moe_bench compares; ChosenDownCombine picks the one ExpertsAndShared launches.
using DownCombineFn = void (*)(const __half*, const int32_t*, const __half*, Nvfp4Rows, SharedDown, __half*, int, int);
struct DownCombineVariant {
  DownCombineShape shape;
  DownCombineFn kernel;
};
inline constexpr DownCombineVariant kDownCombineVariants[] = {
    {{2, 56}, DownCombineKernel<2, 56>},
    {{4, 72}, DownCombineKernel<4, 72>},
    {{2, 80}, DownCombineKernel<2, 80>},
};

// The instance moe_bench timed fastest (H100, run E2): two shared warps under 56 registers where a
// row takes 4 lanes or more (TP1: 12.8 µs against 14.1 at four warps), four warps under 72 where
// fewer (TP2: 8.5 against 9.6; TP4: all three within 0.25 µs).
inline const DownCombineVariant& ChosenDownCombine(int lanes) { return kDownCombineVariants[lanes >= 4 ? 0 : 1]; }

// v: an instance to time in the bench; by default the chosen one.
inline void LaunchDownCombine(const __half* act, const int32_t* idx, const __half* w, const Nvfp4Rows& down,
                              const SharedDown& shared, __half* out, int64_t T, int64_t k, cudaStream_t stream,
                              const DownCombineVariant* v = nullptr) {
  const int lanes = ChunkLanes(down.K), rows_b = kWarp / lanes;
  if (v == nullptr) v = &ChosenDownCombine(lanes);
  v->kernel<<<dim3(CeilDiv(down.N, rows_b), T), kWarp * (k + v->shape.shared_warps),
              DownCombineSharedBytes(k, down.K, shared.Is, rows_b), stream>>>(act, idx, w, down, shared, out,
                                                                              static_cast<int>(k), lanes);
}

}  // namespace q38::cuda::moe_decode
