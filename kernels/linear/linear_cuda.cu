#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/linear/linear_cuda.h"
#include "kernels/linear/linear_gemm.cuh"
#include "kernels/linear/linear_gemv.cuh"

#include <cstdint>

namespace q38::cuda {
namespace {

constexpr int kGemvThreads = 256, kGemvWarps = kGemvThreads / kWarp;
static_assert(kGemvMaxRows == 8, "the vector GEMV instantiates T up to 8");

// The generic GEMV, for K not a multiple of 8 or unaligned pointers: `splits` warps per output
// row n (a power of two up to 8), each over every splits-th element of K, with every one of the
// T ≤ kGemvMaxRows input rows; the partial sums meet in shared memory in a fixed order.
__global__ void ScalarGemvKernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                                 int T, int64_t K, int64_t N, int splits) {
  __shared__ float partial[kGemvWarps][kGemvMaxRows];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, part = warp % splits;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / splits) + warp / splits;
  float acc[kGemvMaxRows] = {};
  if (n < N) {
    const __half* row = w + n * K;
    for (int64_t k = part * kWarp + lane; k < K; k += int64_t{kWarp} * splits) {
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
    const float s = WarpSum(acc[t]);
    if (lane == 0) partial[warp][t] = s;
  }
  __syncthreads();
  if (n >= N || part != 0 || lane >= T) return;
  float s = 0;
  for (int p = 0; p < splits; ++p) s += partial[warp + p][lane];
  y[lane * N + n] = __float2half(s);
}

// The scalar kernel's warps per row: more while N alone would give the GPU few warps.
int ScalarSplits(int64_t K, int64_t N) {
  int splits = 1;
  while (splits < kGemvWarps && N * splits < 8192 && K >= int64_t{splits} * 4 * kWarp * 8) splits *= 2;
  return splits;
}

}  // namespace

// Tuned on one H200 with kernels/linear/linear_bench.cu --sweep over the model's decode shapes at
// TP1, 2 and 4 (docs/journal/2026-12-02-gemv-lab-bench.md, run M): within 3% of the sweep's fastest configuration at every
// one-token shape, within 8% at 4 and 8 tokens.
GemvConfig ChooseGemv(int64_t T, int64_t K, int64_t N) {
  GemvConfig c;
  const int64_t runs = K / 8;
  // A lane group about as wide as the row: short rows (K < 512) would leave most of a warp idle.
  c.lanes = runs >= 64 ? 32 : runs >= 16 ? 16 : 8;
  const int64_t row_warps = CeilDiv(N, kWarp / c.lanes), lane_runs = CeilDiv(runs, c.lanes);
  // More warps per row while the GPU has few warps (more when several token rows make each
  // lane's work longer) and each lane keeps at least four runs per row.
  const int64_t target = T >= 4 ? 12288 : 3072;
  while (c.splits < gemv::kWarps && row_warps * c.splits < target && lane_runs >= 4 * c.splits) c.splits *= 2;
  // Eight loads a lane where the warps fit in about one wave at the occupancy eight allow
  // (72 registers: 24 warps an SM), four where there are more.
  c.unroll = row_warps * c.splits <= 3000 ? 8 : 4;
  return c;
}

void LinearGemv(const GemvConfig& c, const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N,
                cudaStream_t stream) {
  CHECK(T >= 1 && T <= kGemvMaxRows && K % 8 == 0 && K <= INT32_MAX && N <= INT32_MAX && Aligned16(x) && Aligned16(w));
  CHECK(c.splits == 1 || c.splits == 2 || c.splits == 4 || c.splits == 8) << c.splits;
  const int t = static_cast<int>(T), k = static_cast<int>(K), n = static_cast<int>(N);
  switch (c.lanes * 100 + c.unroll) {
    case 804: gemv::LaunchWide<8, 4>(x, w, y, t, k, n, c.splits, stream); break;
    case 808: gemv::LaunchWide<8, 8>(x, w, y, t, k, n, c.splits, stream); break;
    case 1604: gemv::LaunchWide<16, 4>(x, w, y, t, k, n, c.splits, stream); break;
    case 1608: gemv::LaunchWide<16, 8>(x, w, y, t, k, n, c.splits, stream); break;
    case 3204: gemv::LaunchWide<32, 4>(x, w, y, t, k, n, c.splits, stream); break;
    case 3208: gemv::LaunchWide<32, 8>(x, w, y, t, k, n, c.splits, stream); break;
    default: LOG(FATAL) << "no GEMV instantiated for lanes " << c.lanes << " unroll " << c.unroll;
  }
  Q38_CUDA_LAUNCHED();
}

void Linear(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream) {
  if (T <= kGemvMaxRows) {
    if (K % 8 == 0 && K <= INT32_MAX && N <= INT32_MAX && Aligned16(x) && Aligned16(w)) {
      LinearGemv(ChooseGemv(T, K, N), x, w, y, T, K, N, stream);
      return;
    }
    const int splits = ScalarSplits(K, N);
    const dim3 grid(static_cast<unsigned>(CeilDiv(N, kGemvWarps / splits)));
    ScalarGemvKernel<<<grid, kGemvThreads, 0, stream>>>(x, w, y, static_cast<int>(T), K, N, splits);
    Q38_CUDA_LAUNCHED();
    return;
  }
  LinearGemm(ChooseGemm(T, K, N), x, w, y, T, K, N, stream);
}

const char* GemmTileName(GemmTile tile) {
  switch (tile) {
    case GemmTile::k128x128w8: return "128x128w8";
    case GemmTile::k128x128k64w8: return "128x128k64w8";
    case GemmTile::k128x128k64w8a2: return "128x128k64w8a2";
    case GemmTile::k128x128w4: return "128x128w4";
    case GemmTile::k128x64w4: return "128x64w4";
    case GemmTile::k64x64w4: return "64x64w4";
  }
  return "?";
}

// From 512 rows on, 128×128 by 8 warps in steps of 64 with loads two steps ahead, one block an
// SM, where K is longer than 512. In linear_bench (run V2, H100) it leads at GDN out (278.1
// against 273.0 TFLOP/s for the 4-warp tile), the router (172.5 against 162.0) and HC down (160.9
// against 157.5), and far on small grids (GDN out at 512 rows: 164.8 against 107.1 for steps of 64
// with loads one step ahead); it trails on outputs wider than a prefill runs (the GDN stack's
// 16,480 columns as one product: 223.3 against 239.8; a prefill runs one product per part of a
// stacked projection, 10,240 columns at most). With this rule the model's prefill gained 0.5–1.2%
// at 8,192 tokens and 14% at 512 (run V1, H100). Where K is short (HC up, K = 320, five steps) a
// second set of loads has no room to pay, and the 4-warp tile in steps of 32, two blocks an SM,
// stays ahead (138.4 against 127.9). Below 512 rows, untimed: the largest tile that leaves ~2
// blocks for each SM of a V100 (80) or an H200 (132), since a grid of fewer blocks than the GPU
// holds leaves tensor cores idle.
GemmTile ChooseGemm(int64_t T, int64_t K, int64_t N) {
  constexpr int64_t kEnough = 200, kShortK = 512;
  if (T >= 512) return K <= kShortK ? GemmTile::k128x128w4 : GemmTile::k128x128k64w8a2;
  if (CeilDiv(T, 128) * CeilDiv(N, 128) >= kEnough) return GemmTile::k128x128k64w8;
  if (CeilDiv(T, 128) * CeilDiv(N, 64) >= kEnough) return GemmTile::k128x64w4;
  return GemmTile::k64x64w4;
}

void LinearGemm(GemmTile tile, const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N,
                cudaStream_t stream) {
  CHECK(T >= 1 && CeilDiv(T, 64) <= 65535) << "GEMM rows " << T;
  switch (tile) {
    case GemmTile::k128x128w8: gemm::LaunchTiled<gemm::Tile128x128w8, 2>(x, w, y, T, K, N, stream); break;
    case GemmTile::k128x128k64w8: gemm::LaunchTiled<gemm::Tile128x128k64w8, 2>(x, w, y, T, K, N, stream); break;
    case GemmTile::k128x128k64w8a2: gemm::LaunchTiled<gemm::Tile128x128k64w8a2, 1>(x, w, y, T, K, N, stream); break;
    case GemmTile::k128x128w4: gemm::LaunchTiled<gemm::Tile128x128w4, 2>(x, w, y, T, K, N, stream); break;
    case GemmTile::k128x64w4: gemm::LaunchTiled<gemm::Tile128x64w4, 3>(x, w, y, T, K, N, stream); break;
    case GemmTile::k64x64w4: gemm::LaunchTiled<gemm::Tile64x64w4, 4>(x, w, y, T, K, N, stream); break;
  }
  Q38_CUDA_LAUNCHED();
}

}  // namespace q38::cuda
