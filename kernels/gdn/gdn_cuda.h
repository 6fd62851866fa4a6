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

// A GDN layer's mixer for one token (Backend::GdnBlock at T = 1) as one kernel, launched
// cooperatively on every block the device holds at once (gdn_grid_cuda.cu): the stacked
// projection, the causal conv (its state moved on a row), the gates, the delta rule, the gated
// RMSNorm and the out projection, as the composition of those ops gives them up to the order of
// the projections' sums (the delta rule's arithmetic is GdnDeltaRule's). Needs GdnBlockGridFits:
// dk 16, 32, 64 or 128, dv a multiple of 32, H and Hv·dv multiples of 8, at most
// kConvMaxHistory + 1 conv taps, aligned operands and a device that launches cooperatively.
struct GdnBlockDims {
  int64_t H, channels, conv_taps, key_heads, value_heads, key_dim, value_dim;
  float eps;
  bool sigmoid_gate;
  int64_t streams = 0;  // S of the residual update, where asked (at most 32)
};
struct GdnBlockOperands {
  const __half* h;        // [H]
  const __half* in;       // [channels + Hv·dv + 2·Hv, H]: qkv, z, b, a
  const __half* conv_w;   // [channels, conv_taps]
  __half* conv_state;     // [conv_taps - 1, channels]
  const float* a_log;     // [Hv]
  const float* dt_bias;   // [Hv]
  float* state;           // [Hv, dk, dv]
  const __half* norm_w;   // [dv]
  const __half* out_w;    // [H, Hv·dv]
  __half* proj;           // scratch [channels + Hv·dv + 2·Hv]
  __half* o;              // scratch [Hv·dv]
  __half* out;            // [H]
  float* X = nullptr;     // [S, H]: X += g·out as out is written (HcResidual), or null
  const __half* g = nullptr;  // [S]
};
bool GdnBlockGridFits(const GdnBlockDims& d, const void* h, const void* in, const void* out_w);
void GdnBlockGrid(const GdnBlockDims& d, const GdnBlockOperands& x, cudaStream_t stream);

}  // namespace q38::cuda
