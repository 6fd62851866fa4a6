// Gated DeltaNet (docs/model.md §7): gates, the delta rule in its recurrent (decode) and chunked
// (prefill) forms. State and arithmetic are FP32.
#pragma once

#include <cstdint>

namespace q38::cpu {

struct GdnDims {
  int64_t key_heads;    // Hk (local to the rank)
  int64_t value_heads;  // Hv (local); value head j reads key head j / (Hv / Hk)
  int64_t key_dim;      // dk
  int64_t value_dim;    // dv
};

// beta = sigmoid(b); g = −exp(A_log) · softplus(a + dt_bias). b, a, beta, g: [T, Hv].
void GdnGates(const float* b, const float* a, const float* a_log, const float* dt_bias,
              float* beta, float* g, int64_t T, int64_t Hv);

// q, k [T, Hk, dk] and v [T, Hv, dv] straight from the conv; q and k are L2-normalized inside
// (x·rsqrt(Σx²+1e-6)) and q scaled by dk^-1/2. state [Hv, dk, dv] carries across calls.
// o [T, Hv, dv] reads the state after the token's own update.
void GdnRecurrent(const float* q, const float* k, const float* v, const float* beta,
                  const float* g, float* state, float* o, int64_t T, const GdnDims& d);

// The same result computed chunk by chunk (WY form, docs/model.md §7.5), as prefill kernels do.
void GdnChunked(const float* q, const float* k, const float* v, const float* beta, const float* g,
                float* state, float* o, int64_t T, const GdnDims& d, int64_t chunk = 64);

}  // namespace q38::cpu
