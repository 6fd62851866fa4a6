// Mixture of experts (docs/model.md §9): softmax router with renormalized top-k, routed SwiGLU
// experts in ModelOpt NVFP4 (dequantized exactly, W4A16) or dense, and the gated shared expert.
#pragma once

#include <cstdint>

namespace q38::cpu {

// p = softmax(logits) in FP32 over E experts; idx/w [T, k] = the k largest (ties: lower id
// first), weights renormalized to sum 1.
void RouterTopK(const float* logits, int32_t* idx, float* w, int64_t T, int64_t E, int64_t k);

// One projection of every expert in ModelOpt NVFP4: codes [E, N, K/2] (element 2j in the low
// nibble of byte j), scales [E, N, K/16] as E4M3, and a global scale per expert and per row
// range: rows [0, split) use global_a[e], rows [split, N) use global_b[e] (gate and up fused
// into one N = 2I projection keep their own globals).
struct Nvfp4Experts {
  const uint8_t* codes;
  const uint8_t* scales;
  const float* global_a;
  const float* global_b;
  int64_t split;
  int64_t N, K;
};

// Dense experts [E, N, K] in FP32 (the official BF16 release, converted at load).
struct DenseExperts {
  const float* w;
  int64_t N, K;
};

// One expert's row n: W[n, :] dequantized to FP32.
void DequantizeNvfp4Row(const Nvfp4Experts& x, int64_t expert, int64_t n, float* row);

// out [T, H] = Σ_k w[t,k] · down_e( silu(gate_e(h)) ⊙ up_e(h) ), e = idx[t,k]. The fused
// gate|up projection has 2I rows (gate first); down has H rows of I.
void RoutedExperts(const float* h, const int32_t* idx, const float* w, const Nvfp4Experts& gate_up,
                   const Nvfp4Experts& down, float* out, int64_t T, int64_t k);
void RoutedExperts(const float* h, const int32_t* idx, const float* w, const DenseExperts& gate_up,
                   const DenseExperts& down, float* out, int64_t T, int64_t k);

// The same for the fast CPU backend: the pairs grouped by expert, NVFP4 rows decoded by tile (to
// DequantizeNvfp4Row's values) and multiplied by LinearFast (kernels/linear/linear.h).
void RoutedExpertsFast(const float* h, const int32_t* idx, const float* w, const Nvfp4Experts& gate_up,
                       const Nvfp4Experts& down, float* out, int64_t T, int64_t k);
void RoutedExpertsFast(const float* h, const int32_t* idx, const float* w, const DenseExperts& gate_up,
                       const DenseExperts& down, float* out, int64_t T, int64_t k);

// y [T, I] = silu(gu[:, :I]) ⊙ gu[:, I:], gu [T, 2I].
void SiluMul(const float* gu, float* y, int64_t T, int64_t I);

// out [T, H] += sigmoid(gate_logit[t]) · shared [T, H]; gate_logit has stride `gate_stride`.
void AddSigmoidGated(float* out, const float* shared, const float* gate_logit, int64_t gate_stride,
                     int64_t T, int64_t H);

}  // namespace q38::cpu
