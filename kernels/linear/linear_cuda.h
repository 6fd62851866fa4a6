// Dense FP16 linear layer on the GPU: y[T,N] = x[T,K]·w[N,K]ᵀ with FP32 accumulation. Decode
// (few rows) streams the weights once through a GEMV; prefill tiles through WMMA tensor cores
// (kernels/linear/linear_gemm.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

// Rows at or below this count take the GEMV route; the manifest names the route.
constexpr int64_t kGemvMaxRows = 8;

void Linear(const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N, cudaStream_t stream);

// How the vector GEMV (kernels/linear/linear_gemv.cuh) divides the weights: `lanes` lanes per
// output row (8, 16 or 32), `unroll` 16-byte runs a lane loads before its arithmetic (4 or 8),
// `splits` warps sharing each row's K (1, 2, 4 or 8).
struct GemvConfig {
  int lanes = 32, unroll = 4, splits = 1;
};

// The configuration Linear() runs for T ≤ kGemvMaxRows rows where K % 8 == 0 and the pointers
// are 16-byte aligned; a function of the shape alone, so results do not depend on the GPU.
GemvConfig ChooseGemv(int64_t T, int64_t K, int64_t N);

// The vector GEMV with a given configuration (one of those ChooseGemv can return), for tests.
// Needs T ≤ kGemvMaxRows, K % 8 == 0 and 16-byte aligned x and w.
void LinearGemv(const GemvConfig& config, const __half* x, const __half* w, __half* y, int64_t T, int64_t K,
                int64_t N, cudaStream_t stream);

// The block tile of the prefill GEMM (T > kGemvMaxRows): 128×128 by 8 warps (K in steps of 64 or
// 32 columns; "a2": loads two steps ahead) or 4, 128×64 or 64×64 by 4 warps. The tile changes the
// speed only: every tile sums each output in one order.
enum class GemmTile { k128x128k64w8, k128x128k64w8a2, k128x128w8, k128x128w4, k128x64w4, k64x64w4 };
// Every tile, in that order (the bench's columns, the tests' cases).
inline constexpr GemmTile kGemmTiles[] = {GemmTile::k128x128k64w8, GemmTile::k128x128k64w8a2, GemmTile::k128x128w8,
                                          GemmTile::k128x128w4,    GemmTile::k128x64w4,       GemmTile::k64x64w4};
const char* GemmTileName(GemmTile tile);

// The tile Linear() runs for T > kGemvMaxRows where K % 8 == 0 and x, w are 16-byte aligned (a
// function of the shape alone).
GemmTile ChooseGemm(int64_t T, int64_t K, int64_t N);

// The GEMM with a given tile, for tests and the bench. Any shape; K % 8 == 0 with 16-byte aligned
// x and w loads 16 bytes at a time, anything else element by element.
void LinearGemm(GemmTile tile, const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N,
                cudaStream_t stream);

}  // namespace q38::cuda
