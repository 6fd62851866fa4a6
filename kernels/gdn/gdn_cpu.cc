#include "kernels/gdn/gdn.h"

#include <cmath>
#include <vector>

#include "kernels/activation.h"

namespace q38::cpu {
namespace {

// Normalized copies of q and k for one token and head: x·rsqrt(Σx²+1e-6), q also · dk^-1/2.
void L2Normalize(const float* x, float* out, int64_t n, float scale) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss) + 1e-6f);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * scale;
}

struct Normalized {
  std::vector<float> q, k;  // [T, Hk, dk]
};

Normalized NormalizeQk(const float* q, const float* k, int64_t T, const GdnDims& d) {
  Normalized n{std::vector<float>(T * d.key_heads * d.key_dim), std::vector<float>(T * d.key_heads * d.key_dim)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.key_dim));
  for (int64_t r = 0; r < T * d.key_heads; ++r) {
    L2Normalize(q + r * d.key_dim, n.q.data() + r * d.key_dim, d.key_dim, scale);
    L2Normalize(k + r * d.key_dim, n.k.data() + r * d.key_dim, d.key_dim, 1.0f);
  }
  return n;
}

}  // namespace

void GdnGates(const float* b, const float* a, const float* a_log, const float* dt_bias,
              float* beta, float* g, int64_t T, int64_t Hv) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < Hv; ++j) {
      beta[t * Hv + j] = Sigmoid(b[t * Hv + j]);
      g[t * Hv + j] = -std::exp(a_log[j]) * Softplus(a[t * Hv + j] + dt_bias[j]);
    }
  }
}

void GdnRecurrent(const float* q, const float* k, const float* v, const float* beta,
                  const float* g, float* state, float* o, int64_t T, const GdnDims& d) {
  const Normalized n = NormalizeQk(q, k, T, d);
  const int64_t dk = d.key_dim, dv = d.value_dim, ratio = d.value_heads / d.key_heads;
  std::vector<float> delta(dv);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < d.value_heads; ++j) {
      const float* qh = n.q.data() + (t * d.key_heads + j / ratio) * dk;
      const float* kh = n.k.data() + (t * d.key_heads + j / ratio) * dk;
      const float* vh = v + (t * d.value_heads + j) * dv;
      float* S = state + j * dk * dv;
      const float decay = std::exp(g[t * d.value_heads + j]);
      const float b = beta[t * d.value_heads + j];
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
      for (int64_t c = 0; c < dv; ++c) {
        float mem = 0;
        for (int64_t r = 0; r < dk; ++r) mem += S[r * dv + c] * kh[r];
        delta[c] = b * (vh[c] - mem);
      }
      for (int64_t r = 0; r < dk; ++r) {
        for (int64_t c = 0; c < dv; ++c) S[r * dv + c] += kh[r] * delta[c];
      }
      float* oh = o + (t * d.value_heads + j) * dv;
      for (int64_t c = 0; c < dv; ++c) {
        float acc = 0;
        for (int64_t r = 0; r < dk; ++r) acc += S[r * dv + c] * qh[r];
        oh[c] = acc;
      }
    }
  }
}

void GdnChunked(const float* q, const float* k, const float* v, const float* beta, const float* g,
                float* state, float* o, int64_t T, const GdnDims& d, int64_t chunk) {
  const Normalized n = NormalizeQk(q, k, T, d);
  const int64_t dk = d.key_dim, dv = d.value_dim, ratio = d.value_heads / d.key_heads;
  const int64_t Hk = d.key_heads, Hv = d.value_heads;
  std::vector<float> gam(chunk), A(chunk * chunk), U(chunk * dv), W(chunk * dk), Vp(chunk * dv);
  for (int64_t j = 0; j < Hv; ++j) {
    float* S = state + j * dk * dv;
    const int64_t kh = j / ratio;
    for (int64_t c0 = 0; c0 < T; c0 += chunk) {
      const int64_t C = std::min(chunk, T - c0);  // the last chunk is shorter: no padding needed
      auto Q = [&](int64_t i) { return n.q.data() + ((c0 + i) * Hk + kh) * dk; };
      auto K = [&](int64_t i) { return n.k.data() + ((c0 + i) * Hk + kh) * dk; };
      auto Vrow = [&](int64_t i) { return v + ((c0 + i) * Hv + j) * dv; };
      auto B = [&](int64_t i) { return beta[(c0 + i) * Hv + j]; };
      // Γ_i: cumulative log-decay inside the chunk.
      float acc = 0;
      for (int64_t i = 0; i < C; ++i) gam[i] = acc += g[(c0 + i) * Hv + j];
      // A_ij = β_i (k_i·k_j) e^{Γi−Γj}, j < i; solve (I + A) X = R by forward substitution.
      for (int64_t i = 0; i < C; ++i) {
        for (int64_t m = 0; m < i; ++m) {
          float dot = 0;
          for (int64_t r = 0; r < dk; ++r) dot += K(i)[r] * K(m)[r];
          A[i * chunk + m] = B(i) * dot * std::exp(gam[i] - gam[m]);
        }
      }
      for (int64_t i = 0; i < C; ++i) {
        // U_i = β_i v_i − Σ_{m<i} A_im U_m ;  W_i = β_i e^{Γi} k_i − Σ_{m<i} A_im W_m
        for (int64_t c = 0; c < dv; ++c) U[i * dv + c] = B(i) * Vrow(i)[c];
        const float bw = B(i) * std::exp(gam[i]);
        for (int64_t r = 0; r < dk; ++r) W[i * dk + r] = bw * K(i)[r];
        for (int64_t m = 0; m < i; ++m) {
          const float a = A[i * chunk + m];
          for (int64_t c = 0; c < dv; ++c) U[i * dv + c] -= a * U[m * dv + c];
          for (int64_t r = 0; r < dk; ++r) W[i * dk + r] -= a * W[m * dk + r];
        }
      }
      // V' = U − W·S
      for (int64_t i = 0; i < C; ++i) {
        for (int64_t c = 0; c < dv; ++c) {
          float ws = 0;
          for (int64_t r = 0; r < dk; ++r) ws += W[i * dk + r] * S[r * dv + c];
          Vp[i * dv + c] = U[i * dv + c] - ws;
        }
      }
      // O_i = e^{Γi} q_i·S + Σ_{m≤i} (q_i·k_m) e^{Γi−Γm} V'_m
      for (int64_t i = 0; i < C; ++i) {
        float* oh = o + ((c0 + i) * Hv + j) * dv;
        const float ei = std::exp(gam[i]);
        for (int64_t c = 0; c < dv; ++c) {
          float s = 0;
          for (int64_t r = 0; r < dk; ++r) s += Q(i)[r] * S[r * dv + c];
          oh[c] = ei * s;
        }
        for (int64_t m = 0; m <= i; ++m) {
          float dot = 0;
          for (int64_t r = 0; r < dk; ++r) dot += Q(i)[r] * K(m)[r];
          const float wgt = dot * std::exp(gam[i] - gam[m]);
          for (int64_t c = 0; c < dv; ++c) oh[c] += wgt * Vp[m * dv + c];
        }
      }
      // S ← e^{ΓC} S + Σ_m e^{ΓC−Γm} k_m ⊗ V'_m
      const float eC = std::exp(gam[C - 1]);
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= eC;
      for (int64_t m = 0; m < C; ++m) {
        const float e = std::exp(gam[C - 1] - gam[m]);
        for (int64_t r = 0; r < dk; ++r) {
          const float kr = e * K(m)[r];
          for (int64_t c = 0; c < dv; ++c) S[r * dv + c] += kr * Vp[m * dv + c];
        }
      }
    }
  }
}

}  // namespace q38::cpu
