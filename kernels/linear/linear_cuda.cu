#include <mma.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/linear/linear_cuda.h"

namespace q38::cuda {
namespace {

// One warp per output row n: the row is read once, with 16-byte loads where K and the pointers
// allow, and dotted with every one of the T ≤ kGemvMaxRows input rows.
template <bool kVector>
__global__ void GemvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                           int T, int64_t K, int64_t N) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (n >= N) return;
  float acc[kGemvMaxRows] = {};
  const __half* row = w + n * K;
  if constexpr (kVector) {
    for (int64_t k = lane * 8; k < K; k += kWarp * 8) {
      const uint4 wv = __ldg(reinterpret_cast<const uint4*>(row + k));
      const __half2* wh = reinterpret_cast<const __half2*>(&wv);
      float2 wf[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) wf[i] = __half22float2(wh[i]);
#pragma unroll
      for (int t = 0; t < kGemvMaxRows; ++t) {
        if (t >= T) break;
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + t * K + k));
        const __half2* xh = reinterpret_cast<const __half2*>(&xv);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 xf = __half22float2(xh[i]);
          acc[t] += wf[i].x * xf.x + wf[i].y * xf.y;
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += kWarp) {
      const float wf = __half2float(row[k]);
#pragma unroll
      for (int t = 0; t < kGemvMaxRows; ++t) {
        if (t < T) acc[t] += wf * __half2float(x[t * K + k]);
      }
    }
  }
  // Every index into acc is a constant after unrolling, so it stays in registers.
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= T) break;
    const float s = WarpSum(acc[t]);
    if (lane == 0) y[t * N + n] = __float2half(s);
  }
}

// WMMA GEMM: a 64×64 tile of y per block of four warps, each warp a 32×32 quarter as 2×2
// fragments of 16×16×16; K advances 32 at a time through shared memory. Tiles past the edges of
// T, N or K are zero-filled, so any shape works.
constexpr int kBm = 64, kBn = 64, kBk = 32, kPad = 8;

__global__ void GemmKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                           int64_t T, int64_t K, int64_t N, bool vec) {
  using namespace nvcuda;
  __shared__ __align__(32) __half as[kBm][kBk + kPad];
  __shared__ __align__(32) __half bs[kBn][kBk + kPad];
  __shared__ __align__(32) float cs[kBm][kBn + 4];
  const int warp = threadIdx.x / kWarp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm, n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kBk) {
    // 64 rows × 32 columns per operand = 256 runs of 8 halves; 128 threads take two each.
    for (int r = threadIdx.x; r < kBm * kBk / 8; r += blockDim.x) {
      const int row = r / (kBk / 8), col = (r % (kBk / 8)) * 8;
      const int64_t k = k0 + col;
      const int64_t am = m0 + row, bn = n0 + row;
      if (vec && k + 8 <= K) {
        uint4 av = make_uint4(0, 0, 0, 0), bv = make_uint4(0, 0, 0, 0);
        if (am < T) av = *reinterpret_cast<const uint4*>(x + am * K + k);
        if (bn < N) bv = __ldg(reinterpret_cast<const uint4*>(w + bn * K + k));
        *reinterpret_cast<uint4*>(&as[row][col]) = av;
        *reinterpret_cast<uint4*>(&bs[row][col]) = bv;
      } else {
        for (int i = 0; i < 8; ++i) {
          const bool in_k = k + i < K;
          as[row][col + i] = (am < T && in_k) ? x[am * K + k + i] : __float2half(0.0f);
          bs[row][col + i] = (bn < N && in_k) ? w[bn * K + k + i] : __float2half(0.0f);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &as[wm + 16 * i][kk], kBk + kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &bs[wn + 16 * j][kk], kBk + kPad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm + 16 * i][wn + 16 * j], acc[i][j], kBn + 4, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kBm * kBn; e += blockDim.x) {
    const int r = e / kBn, c = e % kBn;
    if (m0 + r < T && n0 + c < N) y[(m0 + r) * N + n0 + c] = __float2half(cs[r][c]);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void Linear(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  if (T <= kGemvMaxRows) {
    constexpr int kThreads = 256;
    const dim3 grid(static_cast<unsigned>(CeilDiv(N * kWarp, kThreads)));
    if (K % 8 == 0 && Aligned16(x) && Aligned16(w)) {
      GemvKernel<true><<<grid, kThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N);
    } else {
      GemvKernel<false><<<grid, kThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N);
    }
  } else {
    const dim3 grid(static_cast<unsigned>(CeilDiv(N, kBn)), static_cast<unsigned>(CeilDiv(T, kBm)));
    const bool vec = K % 8 == 0 && Aligned16(x) && Aligned16(w);
    GemmKernel<<<grid, 128, 0, stream>>>(x, w, y, T, K, N, vec);
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
