// Mixture of experts on the GPU (docs/model.md §9), as kernels/moe/moe.h: the router's softmax
// top-k, the routed SwiGLU experts with NVFP4 weights dequantized inside the kernel (W4A16) or
// dense FP16 weights, and the gated shared expert's helpers.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

namespace q38::cuda {

void RouterTopK(const __half* logits, int32_t* idx, __half* w, int64_t T, int64_t E, int64_t k, cudaStream_t stream);

// One projection of every expert: NVFP4 (codes, scales, globals split at row `split`) or dense
// FP16 (`dense` non-null), [E, N, K].
struct ExpertProjection {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* global_a = nullptr;
  const float* global_b = nullptr;
  int64_t split = 0;
  const __half* dense = nullptr;
  int64_t N = 0, K = 0;
};

// Scratch: act [T·k, I] F16, per-pair outputs [T·k, H] F32, and for the grouped route
// ExpertGroupsInts(T·k, E) I32.
struct ExpertScratch {
  __half* act;
  float* pair_out;
  int32_t* groups;
};
inline int64_t ExpertGroupsInts(int64_t pairs, int64_t E) { return 2 * (E + 1) + pairs; }

// Up to this many tokens each (token, expert) pair streams its expert's rows through a GEMV (decode);
// above it the pairs are grouped by expert and each expert runs as a WMMA GEMM (prefill).
constexpr int64_t kPairwiseMaxTokens = 8;

// The shared expert's output [T, H] and its gate logits (column 0 of rows `gate_stride` apart),
// added by the kernel that sums the routed experts; out = nullptr adds nothing.
struct GatedShared {
  const __half* out = nullptr;
  const __half* gate_logit = nullptr;
  int64_t gate_stride = 1;
};

// The grouped route's block tile: 64 or 128 slots of one expert × 128 columns by 8 warps, K in
// steps of 64 columns. The tile changes the speed only: every tile sums each output in one order.
enum class GroupedTile { k64x128k64w8, k128x128k64w8 };
inline constexpr GroupedTile kGroupedTiles[] = {GroupedTile::k64x128k64w8, GroupedTile::k128x128k64w8};
const char* GroupedTileName(GroupedTile tile);
// The route's tile for `pairs` (token, expert) pairs over E experts: 128 rows where the experts
// average 128 pairs or more (8,192 tokens, top-10 of 512), 64 below, where 128-row tiles would
// be mostly empty (moe_bench, run S3: 5,619 → 5,036 µs at 8,192 tokens; 1,924 against 2,169 at 2,048).
GroupedTile ChooseGroupedTile(int64_t pairs, int64_t E);

// out [T, H] = Σ_j w[t,j] · down_e(silu(gate_e(h)) ⊙ up_e(h)), e = idx[t,j] < E, rounded to FP16,
// then (with shared) AddSigmoidGated's out + sigmoid(gate)·shared, rounded as it rounds; K of
// gate_up and of down must be multiples of 16. `tile`: the grouped route's (tests and the bench;
// unset, ChooseGroupedTile's).
void RoutedExperts(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                   const ExpertProjection& down, __half* out, ExpertScratch scratch, int64_t T, int64_t k, int64_t E,
                   cudaStream_t stream, GatedShared shared = {}, std::optional<GroupedTile> tile = std::nullopt);

// The gated shared expert as the decode route takes it: its gate/up output gu [T, 2·Is] (rows
// contiguous) and its FP16 down weight [H, Is]; the gate logits as GatedShared's.
struct SharedExpert {
  const __half* gu = nullptr;
  const __half* down = nullptr;
  int64_t Is = 0;
  const __half* gate_logit = nullptr;
  int64_t gate_stride = 1;
};
// Backend::ExpertsAndShared in two kernels for T ≤ kPairwiseMaxTokens and NVFP4 experts: gate/up
// with SiLU·up into act [T·k, I] as RoutedExperts runs it, then one kernel for down, the weighted
// sum over the pairs and the gated shared expert with its SiLU·up and its down GEMV. Rounds where
// the composition rounds; the shared expert's dot products add in another order than Linear's.
bool ExpertsAndSharedDecodeFits(const ExpertProjection& gate_up, const ExpertProjection& down, int64_t T, int64_t k,
                                const SharedExpert& shared);
void ExpertsAndSharedDecode(const __half* h, const int32_t* idx, const __half* w, const ExpertProjection& gate_up,
                            const ExpertProjection& down, __half* out, __half* act, int64_t T, int64_t k,
                            const SharedExpert& shared, cudaStream_t stream);

void SiluMul(const __half* gu, __half* y, int64_t T, int64_t I, cudaStream_t stream);
void AddSigmoidGated(__half* out, const __half* shared, const __half* gate_logit, int64_t gate_stride, int64_t T,
                     int64_t H, cudaStream_t stream);

}  // namespace q38::cuda
