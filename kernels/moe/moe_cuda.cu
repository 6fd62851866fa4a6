#include <cstdint>
#include <optional>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_decode.cuh"
#include "kernels/moe/moe_grouped.cuh"

namespace q38::cuda {
namespace {

constexpr int kRouterTokensPerBlock = 4, kRouterPerLane = 16;
constexpr int64_t kRouterMaxExperts = int64_t{kWarp} * kRouterPerLane;

// (v, e) beats (ov, oe): the larger probability, ties to the lower expert id.
__device__ __forceinline__ bool Beats(float v, int e, float ov, int oe) { return v > ov || (v == ov && e < oe); }

// One warp per token, its E ≤ 512 probabilities in registers (lane l holds experts l, l + 32, …):
// softmax over the experts in FP32, then k rounds of a warp argmax over each lane's best, ties to
// the lower id; only the round's winner rescans its own values. Weights are renormalized over
// the chosen. (The probabilities in shared memory, every lane rescanning its share each round,
// took ~10 µs a call at E = 512, k = 10.)
__global__ void __launch_bounds__(kRouterTokensPerBlock * kWarp)
    RouterKernel(const __half* __restrict__ logits, int32_t* __restrict__ idx, __half* __restrict__ w, int64_t T,
                 int64_t E, int64_t k) {
  extern __shared__ float chosen[];  // k per warp
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouterTokensPerBlock + warp;
  if (t >= T) return;  // whole warps leave; nothing below waits on the block
  float p[kRouterPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) {
    const int64_t e = lane + int64_t{kWarp} * s;
    p[s] = e < E ? __half2float(logits[t * E + e]) : -INFINITY;
    mx = fmaxf(mx, p[s]);
  }
  mx = WarpMax(mx);
  float sum = 0;
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) sum += (p[s] = expf(p[s] - mx));  // exp(-inf) = 0 past E
  sum = WarpSum(sum);
#pragma unroll
  for (int s = 0; s < kRouterPerLane; ++s) p[s] = lane + kWarp * s < E ? p[s] / sum : -1.0f;  // below every probability
  // This lane's best: scanning ascending ids keeps the first of equals.
  auto best = [&](float& v, int& e) {
    v = -2.0f;
    e = INT_MAX;
#pragma unroll
    for (int s = 0; s < kRouterPerLane; ++s) {
      if (p[s] > v) {
        v = p[s];
        e = lane + kWarp * s;
      }
    }
  };
  float v;
  int i;
  best(v, i);
  float* mine = chosen + warp * k;
  float top = 0;
  for (int64_t j = 0; j < k; ++j) {
    float bv = v;
    int bi = i;
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (Beats(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    // Every lane now holds the same (bv, bi).
    top += bv;
    if (lane == 0) {
      idx[t * k + j] = bi;
      mine[j] = bv;
    }
    if (bi % kWarp == lane) {
#pragma unroll
      for (int s = 0; s < kRouterPerLane; ++s) {
        if (lane + kWarp * s == bi) p[s] = -1.0f;  // taken, like the padding
      }
      best(v, i);
    }
  }
  __syncwarp();
  for (int64_t j = lane; j < k; j += kWarp) w[t * k + j] = __float2half(mine[j] / top);
}

// out[t, n] = Σ_j w[t, j] · pair_out[t·k + j, n], in a fixed order; then the gated shared expert
// as AddSigmoidGatedKernel adds it. The first kCombineLoads pairs' values are loaded before the
// sum, so that they cost one memory round trip rather than one each.
constexpr int kCombineLoads = 16;
__global__ void CombineKernel(const float* __restrict__ pair_out, const __half* __restrict__ w,
                              __half* __restrict__ out, int64_t T, int64_t k, int64_t H, GatedShared shared) {
  const int64_t n = TokenColumn();
  if (n >= H) return;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    const int64_t i = t * H + n;
    float wv[kCombineLoads], pv[kCombineLoads];
#pragma unroll
    for (int j = 0; j < kCombineLoads; ++j) {
      if (j < k) {
        wv[j] = __half2float(w[t * k + j]);
        pv[j] = pair_out[(t * k + j) * H + n];
      }
    }
    float acc = 0;
#pragma unroll
    for (int j = 0; j < kCombineLoads; ++j) {
      if (j < k) acc += wv[j] * pv[j];
    }
    for (int64_t j = kCombineLoads; j < k; ++j) acc += __half2float(w[t * k + j]) * pair_out[(t * k + j) * H + n];
    __half routed = __float2half(acc);
    if (shared.out != nullptr) {
      const float s = Sigmoid(__half2float(shared.gate_logit[t * shared.gate_stride]));
      routed = __float2half(__half2float(routed) + s * __half2float(shared.out[i]));
    }
    out[i] = routed;
  }
}

// The lane-group decode kernels' rows a lane group and runs loaded ahead, as moe_bench's sweep
// chose them (down only where the chunked kernel does not take the shape).
struct DecodeShape {
  int rows, ahead;
};
constexpr DecodeShape kDecodeGateUp{1, 0}, kDecodeDown{2, 3};

// The chunked down kernel (moe_decode.cuh) where it takes the shape: NVFP4 weights whose K fit
// it. False where the lane-group kernel must run instead.
template <typename Rows>
bool DownChunked(const Rows& down, const int32_t* idx, ExpertScratch s, int64_t pairs, cudaStream_t stream) {
  if constexpr (!std::is_same_v<Rows, moe_decode::Nvfp4Rows>) {
    return false;
  } else {
    if (!moe_decode::ChunksFit(down)) return false;
    moe_decode::LaunchDownChunks(s.act, idx, down, s.pair_out, pairs, stream);
    Q38_CUDA_LAUNCHED();
    return true;
  }
}

// The grouped route on one tile shape: the pairs grouped in tiles of its rows, gate/up with
// SiLU·up into act, down into pair_out.
template <typename Shape, typename Rows>
void RunGrouped(const __half* h, const int32_t* idx, const Rows& gate_up, const Rows& down, ExpertScratch s,
                int64_t pairs, int64_t k, int64_t E, cudaStream_t stream) {
  const int64_t tiles = moe_grouped::TileBound(pairs, E, Shape::kBM);
  CHECK_LE(tiles, 65535) << "too many expert tiles for one grid";
  moe_grouped::LaunchGroupPairs(idx, pairs, E, Shape::kBM, s.groups, stream);
  moe_grouped::LaunchGateUp<Shape>(h, gate_up, s.groups, s.act, pairs, k, E, tiles, stream);
  moe_grouped::LaunchDown<Shape>(s.act, down, s.groups, s.pair_out, pairs, E, tiles, stream);
}

template <typename Rows>
void RunExperts(const __half* h, const int32_t* idx, const __half* w, const Rows& gate_up, const Rows& down,
                __half* out, ExpertScratch s, int64_t T, int64_t k, int64_t E, cudaStream_t stream,
                GatedShared shared, std::optional<GroupedTile> tile) {
  const int64_t H = down.N, pairs = T * k;
  if (T > kPairwiseMaxTokens) {
    moe_grouped::WithTile(tile.value_or(ChooseGroupedTile(pairs, E)), [&](auto shape) {
      RunGrouped<decltype(shape)>(h, idx, gate_up, down, s, pairs, k, E, stream);
    });
  } else {
    moe_decode::LaunchGateUp<Rows, kDecodeGateUp.rows, kDecodeGateUp.ahead>(h, idx, gate_up, s.act, pairs, k, stream);
    Q38_CUDA_LAUNCHED();
    if (!DownChunked(down, idx, s, pairs, stream)) {
      moe_decode::LaunchDown<Rows, kDecodeDown.rows, kDecodeDown.ahead>(s.act, idx, down, s.pair_out, pairs, stream);
      Q38_CUDA_LAUNCHED();
    }
  }
  CombineKernel<<<TokenColumnGrid(T, H), kTokenColumnThreads, 0, stream>>>(s.pair_out, w, out, T, k, H, shared);
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
  CHECK_LE(E, kRouterMaxExperts) << "experts for the router kernel";
  CHECK_LE(k, E) << "experts per token";
  const size_t shared = kRouterTokensPerBlock * k * sizeof(float);
  RouterKernel<<<CeilDiv(T, kRouterTokensPerBlock), kRouterTokensPerBlock * kWarp, shared, stream>>>(logits, idx, w,
                                                                                                     T, E, k);
  Q38_CUDA_LAUNCHED();
}

const char* GroupedTileName(GroupedTile tile) {
  switch (tile) {
    case GroupedTile::k64x128k64w8: return "64x128k64w8";
    case GroupedTile::k128x128k64w8: return "128x128k64w8";
  }
  return "?";
}

GroupedTile ChooseGroupedTile(int64_t pairs, int64_t E) {
  return pairs >= moe_grouped::Tile128x128k64w8::kBM * E ? GroupedTile::k128x128k64w8 : GroupedTile::k64x128k64w8;
}

void RoutedExperts(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                   const ExpertProjection& down, __half* out, ExpertScratch scratch, int64_t T, int64_t k, int64_t E,
                   cudaStream_t stream, GatedShared shared, std::optional<GroupedTile> tile) {
  CHECK(gate_up.K % 16 == 0 && down.K % 16 == 0) << "expert K must be a multiple of 16";
  CHECK(reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(scratch.act) % 16 == 0)
      << "expert inputs must be 16-byte aligned";
  CHECK(reinterpret_cast<uintptr_t>(gate_up.codes) % 8 == 0 && reinterpret_cast<uintptr_t>(down.codes) % 8 == 0)
      << "expert codes must be 8-byte aligned";
  if (gate_up.dense != nullptr) {
    RunExperts(h, idx, w, moe_decode::DenseRows::Of(gate_up), moe_decode::DenseRows::Of(down), out, scratch, T, k, E,
               stream, shared, tile);
  } else {
    RunExperts(h, idx, w, moe_decode::Nvfp4Rows::Of(gate_up), moe_decode::Nvfp4Rows::Of(down), out, scratch, T, k, E,
               stream, shared, tile);
  }
}

namespace {
moe_decode::SharedDown SharedDownOf(const SharedExpert& s) {
  return {s.gu, s.down, static_cast<int>(s.Is), s.gate_logit, s.gate_stride};
}
}  // namespace

bool ExpertsAndSharedDecodeFits(const ExpertProjection& gate_up, const ExpertProjection& down, int64_t T, int64_t k,
                                const SharedExpert& shared) {
  return T >= 1 && T <= kPairwiseMaxTokens && gate_up.dense == nullptr && down.dense == nullptr &&
         gate_up.K % 16 == 0 && reinterpret_cast<uintptr_t>(gate_up.codes) % 8 == 0 && shared.Is <= INT32_MAX &&
         moe_decode::DownCombineFits(moe_decode::Nvfp4Rows::Of(down), k, SharedDownOf(shared));
}

void ExpertsAndSharedDecode(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                            const ExpertProjection& down, __half* out, __half* act, int64_t T, int64_t k,
                            const SharedExpert& shared, cudaStream_t stream) {
  CHECK(ExpertsAndSharedDecodeFits(gate_up, down, T, k, shared)) << "ExpertsAndSharedDecode: T " << T << " k " << k;
  CHECK(reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(act) % 16 == 0)
      << "expert inputs must be 16-byte aligned";
  const auto gu = moe_decode::Nvfp4Rows::Of(gate_up), dn = moe_decode::Nvfp4Rows::Of(down);
  moe_decode::LaunchGateUp<moe_decode::Nvfp4Rows, kDecodeGateUp.rows, kDecodeGateUp.ahead>(h, idx, gu, act, T * k, k,
                                                                                           stream);
  Q38_CUDA_LAUNCHED();
  moe_decode::LaunchDownCombine(act, idx, w, dn, SharedDownOf(shared), out, T, k, stream);
  Q38_CUDA_LAUNCHED();
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
