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

}  // namespace q38::cuda
