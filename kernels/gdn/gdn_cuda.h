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

// Device floats GdnDeltaRule needs as scratch for T tokens (the chunked form's T and P tiles; 0
// below 32 tokens).
int64_t GdnDeltaRuleScratchFloats(int64_t T, int64_t value_heads);

// qkv [T, 2·Hk·dk + Hv·dv] from the conv; state F32 [Hv, dk, dv]; o [T, Hv·dv]; scratch as above
// (null when it is 0). dk must be 16, 32, 64 or 128.
void GdnDeltaRule(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
                  int64_t T, int64_t key_heads, int64_t value_heads, int64_t key_dim, int64_t value_dim,
                  cudaStream_t stream);

// A GDN layer's mixer for one token (Backend::GdnMixer) in one kernel instead of four (conv,
// gates, delta rule, gated norm): block (value head, 32 value columns) makes the conv outputs and
// the gates it reads, steps its state columns and stores its columns of o in scratch; the last of
// a head's blocks normalizes the head into y. The same arithmetic as the four kernels, so the same
// bits (conv history, state, y). `arrivals`: at least GdnMixerArrivals(Hk, Hv) ints, zero before
// the first call; each call leaves them zero.
struct GdnMixerParams {
  const __half* conv_w;  // [C, 4]
  const float* a_log;    // [Hv]
  const float* dt_bias;  // [Hv]
  const __half* norm_w;  // [dv]
  float eps;
  bool sigmoid_gate;
};
inline int64_t GdnMixerArrivals(int64_t key_heads, int64_t value_heads) { return key_heads + value_heads; }
// Whether the kernel takes the shapes: dk 16, 32, 64 or 128 and Hv a multiple of Hk.
bool GdnMixerFits(int64_t key_heads, int64_t value_heads, int64_t key_dim);
// raw [2·Hk·dk + Hv·dv] (the projection before the conv), z [Hv·dv], b and a [Hv]; conv_state
// [3, C] FP16; state F32 [Hv, dk, dv]; o scratch [Hv·dv]; y [Hv·dv].
void GdnMixer(const __half* raw, const __half* z, const __half* b, const __half* a, const GdnMixerParams& p,
              __half* conv_state, float* state, __half* o, __half* y, int* arrivals, int64_t key_heads,
              int64_t value_heads, int64_t key_dim, int64_t value_dim, cudaStream_t stream);

}  // namespace q38::cuda
