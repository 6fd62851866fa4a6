#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wmma_tile.cuh"
#include "kernels/moe/moe_cuda.h"

namespace q38::cuda {
namespace {

constexpr int kRouterTokensPerBlock = 4;

// One warp per token, its probabilities in shared memory: softmax over the experts in FP32, then
// k rounds of a warp argmax (ties to the lower id) with no block-wide barrier, weights
// renormalized over the chosen. (A block per token with k rounds of block argmax took ~13 µs a
// call at E = 512, k = 10: two barriers per round.)
__global__ void __launch_bounds__(kRouterTokensPerBlock * kWarp)
    RouterKernel(const __half* __restrict__ logits, int32_t* __restrict__ idx, __half* __restrict__ w, int64_t T,
                 int64_t E, int64_t k) {
  extern __shared__ float probs[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouterTokensPerBlock + warp;
  if (t >= T) return;  // whole warps leave; nothing below waits on the block
  float* p = probs + warp * (E + k);  // E probabilities, then the k chosen
  float mx = -INFINITY;
  for (int64_t e = lane; e < E; e += kWarp) {
    p[e] = __half2float(logits[t * E + e]);
    mx = fmaxf(mx, p[e]);
  }
  mx = WarpMax(mx);
  float sum = 0;
  for (int64_t e = lane; e < E; e += kWarp) sum += (p[e] = expf(p[e] - mx));
  sum = WarpSum(sum);
  for (int64_t e = lane; e < E; e += kWarp) p[e] /= sum;
  __syncwarp();
  float top = 0;
  for (int64_t j = 0; j < k; ++j) {
    float v = -1.0f;
    int i = INT_MAX;
    for (int64_t e = lane; e < E; e += kWarp) {
      if (p[e] > v) {  // ascending e: the first of equals is kept
        v = p[e];
        i = static_cast<int>(e);
      }
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (ov > v || (ov == v && oi < i)) {
        v = ov;
        i = oi;
      }
    }
    // Every lane now holds the same (v, i).
    top += v;
    if (lane == 0) {
      idx[t * k + j] = i;
      p[E + j] = v;
      p[i] = -2.0f;  // below every probability
    }
    __syncwarp();
  }
  for (int64_t j = lane; j < k; j += kWarp) w[t * k + j] = __float2half(p[E + j] / top);
}

// The weights of row n of expert e at columns j..j+7 (j a multiple of 8): Dot8 dots them with
// eight FP32 inputs; LoadTile8 writes them as FP16 without the per-expert global scale (E2M1 ×
// E4M3 has at most 6 significant bits within FP16's normal range, so it is exact), which Global
// gives. e2m1 is the 16 code values in shared memory: one table read per weight instead of a
// decode of its bits, which cost about ten instructions per 4-bit weight.
struct Nvfp4Rows {
  const uint8_t* codes;
  const uint8_t* scales;
  const float* global_a;
  const float* global_b;
  int64_t split, N, K;
  __device__ __forceinline__ float Global(int64_t e, int64_t n) const { return n < split ? global_a[e] : global_b[e]; }
  __device__ __forceinline__ float Dot8(int64_t e, int64_t n, int64_t j, const float* x, const float* e2m1) const {
    const int64_t row = e * N + n;
    const uint32_t c = __ldg(reinterpret_cast<const uint32_t*>(codes + row * (K / 2) + j / 2));
    float dot = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) dot += e2m1[(c >> (4 * i)) & 15u] * x[i];
    return dot * E4m3(__ldg(scales + row * (K / 16) + j / 16)) * Global(e, n);
  }
  __device__ __forceinline__ void LoadTile8(int64_t e, int64_t n, int64_t j, __half* out) const {
    const int64_t row = e * N + n;
    const uint32_t c = __ldg(reinterpret_cast<const uint32_t*>(codes + row * (K / 2) + j / 2));
    const float s = E4m3(__ldg(scales + row * (K / 16) + j / 16));
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __float2half(E2m1(c >> (4 * i)) * s);
  }
};

struct DenseRows {
  const __half* w;
  int64_t N, K;
  __device__ __forceinline__ float Global(int64_t, int64_t) const { return 1.0f; }
  __device__ __forceinline__ float Dot8(int64_t e, int64_t n, int64_t j, const float* x, const float*) const {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(w + (e * N + n) * K + j));
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    float dot = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      dot += f.x * x[2 * i] + f.y * x[2 * i + 1];
    }
    return dot;
  }
  __device__ __forceinline__ void LoadTile8(int64_t e, int64_t n, int64_t j, __half* out) const {
    *reinterpret_cast<uint4*>(out) = __ldg(reinterpret_cast<const uint4*>(w + (e * N + n) * K + j));
  }
};

// x (F16 row) · weights row n of expert e, reduced over the warp.
template <typename Rows>
__device__ __forceinline__ float RowDot(const Rows& rows, int64_t e, int64_t n, const __half* x, int lane,
                                        const float* e2m1) {
  float acc = 0;
#pragma unroll 4  // several weight loads in flight per lane
  for (int64_t j = lane * 8; j < rows.K; j += kWarp * 8) {
    const uint4 xv = *reinterpret_cast<const uint4*>(x + j);
    const __half2* xh = reinterpret_cast<const __half2*>(&xv);
    float xf[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(xh[i]);
      xf[2 * i] = f.x;
      xf[2 * i + 1] = f.y;
    }
    acc += rows.Dot8(e, n, j, xf, e2m1);
  }
  return WarpSum(acc);
}

// The E2M1 code values in shared memory, for Nvfp4Rows::Dot8; every thread of the block waits
// for them, so call it before any thread leaves.
__device__ __forceinline__ const float* E2m1Table() {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = E2m1(threadIdx.x);
  __syncthreads();
  return table;
}

constexpr int kExpertThreads = 256;

// Block (pair p = t·k + j on x, a run of rows on y): one warp per intermediate row i computes the gate row i and the
// up row I + i of expert idx[p] and writes silu(gate)·up.
template <typename Rows>
__global__ void GateUpKernel(const __half* __restrict__ h, const int32_t* __restrict__ idx, Rows rows,
                             __half* __restrict__ act, int64_t k, int64_t I) {
  const int64_t pair = blockIdx.x, t = pair / k;
  const int lane = threadIdx.x % kWarp;
  const int64_t i = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) / kWarp;
  const float* e2m1 = E2m1Table();
  if (i >= I) return;
  const int64_t e = idx[pair];
  const __half* x = h + t * rows.K;
  const float gate = RowDot(rows, e, i, x, lane, e2m1), up = RowDot(rows, e, I + i, x, lane, e2m1);
  if (lane == 0) act[pair * I + i] = __float2half(Silu(gate) * up);
}

// Block (pair, rows): one warp per output row n of the down projection, in FP32.
template <typename Rows>
__global__ void DownKernel(const __half* __restrict__ act, const int32_t* __restrict__ idx, Rows rows,
                           float* __restrict__ pair_out) {
  const int64_t pair = blockIdx.x;
  const int lane = threadIdx.x % kWarp;
  const int64_t n = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) / kWarp;
  const float* e2m1 = E2m1Table();
  if (n >= rows.N) return;
  const float y = RowDot(rows, idx[pair], n, act + pair * rows.K, lane, e2m1);
  if (lane == 0) pair_out[pair * rows.N + n] = y;
}

// out[t, n] = Σ_j w[t, j] · pair_out[t·k + j, n], in a fixed order.
__global__ void CombineKernel(const float* __restrict__ pair_out, const __half* __restrict__ w,
                              __half* __restrict__ out, int64_t T, int64_t k, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, n = i % H;
  float acc = 0;
  for (int64_t j = 0; j < k; ++j) acc += __half2float(w[t * k + j]) * pair_out[(t * k + j) * H + n];
  out[i] = __float2half(acc);
}

// Prefill: the pairs grouped by expert, so each expert's weights are read once per 64 of its
// pairs instead of once per pair. groups = start[E+1] (first sorted slot of each expert),
// tile_start[E+1] (first 64-slot tile of each expert), then order[pairs] (pair of each slot).
// Within an expert the slots come in atomic order; a row's arithmetic does not depend on its
// place in the tile, so the results do not either.
__global__ void GroupPairsKernel(const int32_t* __restrict__ idx, int64_t pairs, int64_t E, int32_t* groups) {
  extern __shared__ int32_t counts[];  // [E] counts, then [E] cursors
  int32_t* cursor = counts + E;
  int32_t *start = groups, *tile_start = groups + E + 1, *order = groups + 2 * (E + 1);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&counts[idx[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t slot = 0, tile = 0;
    for (int64_t e = 0; e < E; ++e) {
      start[e] = cursor[e] = slot;
      tile_start[e] = tile;
      slot += counts[e];
      tile += (counts[e] + kTileM - 1) / kTileM;
    }
    start[E] = slot;
    tile_start[E] = tile;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) order[atomicAdd(&cursor[idx[p]], 1)] = static_cast<int32_t>(p);
}

// One 64-slot × 64-column tile of one expert's projection (blockIdx.y: the tile in
// GroupPairsKernel's numbering; blocks past the last tile return). A's rows are x[pair / a_div]:
// the token's hidden state for gate_up (a_div = k), the pair's activation for down (a_div = 1).
// kSwiGlu: the 64 columns are gate rows n0..n0+31 and up rows I+n0..I+n0+31, and the tile writes
// act[pair, n0 + c] = silu(gate)·up; otherwise it writes pair_out[pair, n] in FP32.
template <typename Rows, bool kSwiGlu>
__global__ void __launch_bounds__(kTileThreads)
    GroupedExpertKernel(const __half* __restrict__ x, int64_t a_div, const int32_t* __restrict__ groups, int64_t E,
                        Rows rows, __half* __restrict__ act, float* __restrict__ pair_out) {
  __shared__ __align__(32) TileShared s;
  __shared__ int32_t pair_of[kTileM];
  const int32_t *start = groups, *tile_start = groups + E + 1, *order = groups + 2 * (E + 1);
  const int32_t tile = blockIdx.y;
  if (tile >= tile_start[E]) return;
  int64_t lo = 0, hi = E - 1;  // the expert whose tiles hold `tile`: last e with tile_start[e] <= tile
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int64_t e = lo, s0 = start[e] + int64_t{tile - tile_start[e]} * kTileM;
  const int valid = static_cast<int>(start[e + 1] - s0 < kTileM ? start[e + 1] - s0 : kTileM);
  if (threadIdx.x < kTileM) pair_of[threadIdx.x] = threadIdx.x < valid ? order[s0 + threadIdx.x] : -1;
  __syncthreads();
  const int64_t K = rows.K, I = rows.N / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kSwiGlu ? kTileN / 2 : kTileN);
  // The weight row behind tile column c, or -1 past the edge.
  auto weight_row = [&](int c) -> int64_t {
    if constexpr (kSwiGlu) {
      const int64_t i = n0 + c % (kTileN / 2);
      return i < I ? (c < kTileN / 2 ? i : I + i) : -1;
    } else {
      return n0 + c < rows.N ? n0 + c : -1;
    }
  };
  MmaTile(
      s, K,
      [&](int row, int64_t k, __half* dst) {
        const int32_t p = pair_of[row];
        LoadHalf8(p >= 0 ? x + (p / a_div) * K : nullptr, k, K, /*vec=*/true, dst);
      },
      [&](int row, int64_t k, __half* dst) {
        const int64_t n = weight_row(row);
        if (n >= 0 && k < K) {
          rows.LoadTile8(e, n, k, dst);  // K is a multiple of 16, so k < K has all 8
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
      });
  constexpr int kCols = kSwiGlu ? kTileN / 2 : kTileN;
  for (int i = threadIdx.x; i < kTileM * kCols; i += blockDim.x) {
    const int r = i / kCols, c = i % kCols;
    const int64_t n = weight_row(c);
    if (r >= valid || n < 0) continue;
    const int64_t p = pair_of[r];
    if constexpr (kSwiGlu) {
      const float gate = s.c[r][c] * rows.Global(e, n), up = s.c[r][c + kCols] * rows.Global(e, I + n);
      act[p * I + n] = __float2half(Silu(gate) * up);
    } else {
      pair_out[p * rows.N + n] = s.c[r][c] * rows.Global(e, n);
    }
  }
}

template <typename Rows>
void RunExperts(const __half* h, const int32_t* idx, const __half* w, const Rows& gate_up, const Rows& down,
                __half* out, ExpertScratch s, int64_t T, int64_t k, int64_t E, cudaStream_t stream) {
  const int64_t I = down.K, H = down.N, pairs = T * k;
  if (T <= kPairwiseMaxTokens) {
    constexpr int kRowsPerBlock = kExpertThreads / kWarp;
    GateUpKernel<<<dim3(pairs, CeilDiv(I, kRowsPerBlock)), kExpertThreads, 0, stream>>>(h, idx, gate_up, s.act, k, I);
    Q38_CUDA_LAUNCHED();
    DownKernel<<<dim3(pairs, CeilDiv(H, kRowsPerBlock)), kExpertThreads, 0, stream>>>(s.act, idx, down, s.pair_out);
    Q38_CUDA_LAUNCHED();
  } else {
    const int64_t tiles = CeilDiv(pairs, kTileM) + E;  // bounds Σ_e ⌈count_e / 64⌉
    CHECK_LE(tiles, 65535) << "too many expert tiles for one grid";
    GroupPairsKernel<<<1, 1024, 2 * E * sizeof(int32_t), stream>>>(idx, pairs, E, s.groups);
    Q38_CUDA_LAUNCHED();
    GroupedExpertKernel<Rows, true><<<dim3(CeilDiv(I, kTileN / 2), tiles), kTileThreads, 0, stream>>>(
        h, k, s.groups, E, gate_up, s.act, nullptr);
    Q38_CUDA_LAUNCHED();
    GroupedExpertKernel<Rows, false><<<dim3(CeilDiv(H, kTileN), tiles), kTileThreads, 0, stream>>>(
        s.act, 1, s.groups, E, down, nullptr, s.pair_out);
    Q38_CUDA_LAUNCHED();
  }
  CombineKernel<<<CeilDiv(T * H, 256), 256, 0, stream>>>(s.pair_out, w, out, T, k, H);
  Q38_CUDA_LAUNCHED();
}

__global__ void SiluMulKernel(const __half* __restrict__ gu, __half* __restrict__ y, int64_t T, int64_t I) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * I) return;
  const int64_t t = i / I, c = i % I;
  y[i] = __float2half(Silu(__half2float(gu[t * 2 * I + c])) * __half2float(gu[t * 2 * I + I + c]));
}

__global__ void AddSigmoidGatedKernel(__half* out, const __half* __restrict__ shared, const __half* __restrict__ gate,
                                      int64_t stride, int64_t T, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const float s = Sigmoid(__half2float(gate[(i / H) * stride]));
  out[i] = __float2half(__half2float(out[i]) + s * __half2float(shared[i]));
}

}  // namespace

void RouterTopK(const __half* logits, int32_t* idx, __half* w, int64_t T, int64_t E, int64_t k, cudaStream_t stream) {
  const size_t shared = kRouterTokensPerBlock * (E + k) * sizeof(float);
  CHECK_LE(shared, 48 * 1024) << E << " experts";
  RouterKernel<<<CeilDiv(T, kRouterTokensPerBlock), kRouterTokensPerBlock * kWarp, shared, stream>>>(logits, idx, w,
                                                                                                     T, E, k);
  Q38_CUDA_LAUNCHED();
}

void RoutedExperts(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                   const ExpertProjection& down, __half* out, ExpertScratch scratch, int64_t T, int64_t k, int64_t E,
                   cudaStream_t stream) {
  CHECK(gate_up.K % 16 == 0 && down.K % 16 == 0) << "expert K must be a multiple of 16";
  CHECK(reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(scratch.act) % 16 == 0)
      << "expert inputs must be 16-byte aligned";
  if (gate_up.dense != nullptr) {
    RunExperts(h, idx, w, DenseRows{gate_up.dense, gate_up.N, gate_up.K}, DenseRows{down.dense, down.N, down.K}, out,
               scratch, T, k, E, stream);
  } else {
    const Nvfp4Rows gu{gate_up.codes, gate_up.scales, gate_up.global_a, gate_up.global_b, gate_up.split, gate_up.N, gate_up.K};
    const Nvfp4Rows dn{down.codes, down.scales, down.global_a, down.global_b, down.split, down.N, down.K};
    RunExperts(h, idx, w, gu, dn, out, scratch, T, k, E, stream);
  }
}

void SiluMul(const __half* gu, __half* y, int64_t T, int64_t I, cudaStream_t stream) {
  SiluMulKernel<<<CeilDiv(T * I, 256), 256, 0, stream>>>(gu, y, T, I);
  Q38_CUDA_LAUNCHED();
}

void AddSigmoidGated(__half* out, const __half* shared, const __half* gate_logit, int64_t gate_stride, int64_t T,
                     int64_t H, cudaStream_t stream) {
  AddSigmoidGatedKernel<<<CeilDiv(T * H, 256), 256, 0, stream>>>(out, shared, gate_logit, gate_stride, T, H);
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
