// Gated DeltaNet on the GPU (docs/model.md §7): the gates, and the delta rule over a call's tokens
// with the FP32 state held in registers, or (calls of 32 tokens or more) in its chunked form, as
// kernels/gdn/gdn.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void GdnGates(const __half* b, const __half* a, const float* a_log, const float* dt_bias, float* beta, float* g,
              int64_t T, int64_t Hv, cudaStream_t stream);

// qkv [T, 2·Hk·dk + Hv·dv] from the conv; state F32 [Hv, dk, dv]; o [T, Hv·dv].
// dk must be 16, 32, 64 or 128.
void GdnDeltaRule(const __half* qkv, const float* beta, const float* g, float* state, __half* o, int64_t T,
                  int64_t key_heads, int64_t value_heads, int64_t key_dim, int64_t value_dim, cudaStream_t stream);

// One token of a GDN layer between its projections as one kernel (kernels/backend.h, GdnMix): the
// causal conv of qkv [C = 2·Hk·dk + Hv·dv] with conv_w [C, K] and the FP16 history conv_state
// [K−1, C] (SiLU), the gates from b, a [Hv], the delta rule on the FP32 state [Hv, dk, dv], and the
// gated RMS norm with norm [dv] and z [Hv·dv] into y [Hv·dv]. The conv output and the delta rule's
// output round to FP16 where the composition stores them. counters [Hk] are zero before a call and
// after it: the value heads sharing a key head count there who has read its history (the last one
// rewrites it).
struct GdnMixArgs {
  const __half *qkv, *z, *b, *a, *conv_w, *norm;
  const float *a_log, *dt_bias;
  __half* conv_state;
  float* state;
  __half* y;
  int* counters;
  int64_t Hk, Hv, dk, dv, K;
  bool sigmoid_gate;
  float eps;
};
constexpr int64_t kGdnMixMaxKeyHeads = 256;
// dk 16, 32, 64 or 128; dv up to 128; Hv a multiple of Hk; K − 1 within the conv's history.
bool GdnMixFits(int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t K);
void GdnMix(const GdnMixArgs& args, cudaStream_t stream);

}  // namespace q38::cuda
