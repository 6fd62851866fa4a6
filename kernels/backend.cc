// The op interface's default compositions (kernels/backend.h): a fused op that a backend does not
// fuse runs as the ops it stands for, in the order the model ran them before it was fused.
#include "kernels/backend.h"

#include "glog/logging.h"

namespace q38 {

void Backend::HcPre(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h,
                    Tensor& g, int64_t streams, float eps) {
  const int64_t T = X.dim(0), S = streams, H = h.dim(-1);
  Buffer xn = Alloc(act_dtype(), {T, S * H});
  RmsNorm(X, norm, xn.t(), H, /*zero_centred=*/true, eps);
  HcPreOfNormed(xn.t(), down_inject, up, h, g, S);
}

void Backend::HcPreOfNormed(const Tensor& xn, const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g,
                            int64_t streams) {
  const int64_t T = xn.dim(0), R = up.dim(1), rows = down_inject.dim(0);
  CHECK(rows == R || rows == R + streams) << "HcPre: " << rows << " down/inject rows for R = " << R << ", S = "
                                          << streams;
  const bool inject = rows == R + streams;
  Buffer di = Alloc(act_dtype(), {T, rows});
  Linear(xn, down_inject, di.t());
  Buffer a = Alloc(act_dtype(), {T, R});
  Tensor none;
  HcGates(di.t(), a.t(), inject ? g : none, streams, inject);
  Buffer m = Alloc(act_dtype(), {T, xn.dim(-1)});
  Linear(a.t(), up, m.t());
  HcCombine(m.t(), xn, h);
}

void Backend::HcResidualPre(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm,
                            const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g, int64_t streams,
                            float eps) {
  CHECK(g_last.data != g.data) << "HcResidualPre: the last gates and the new ones share a tensor";
  HcResidual(X, g_last, y);
  HcPre(X, norm, down_inject, up, h, g, streams, eps);
}

void Backend::HcResidualNorm(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm, Tensor& xn,
                             float eps) {
  HcResidual(X, g_last, y);
  RmsNorm(X, norm, xn, y.dim(-1), /*zero_centred=*/true, eps);
}

void Backend::GdnMixer(const Tensor& raw, const Tensor& z, const Tensor& b, const Tensor& a, const GdnMixerWeights& w,
                       Tensor& conv_state, Tensor& state, Tensor& y, float eps) {
  const int64_t T = raw.dim(0), Hv = a.dim(-1);
  Buffer xc = Alloc(act_dtype(), {T, raw.dim(-1)});
  CausalConv(raw, w.conv, conv_state, xc.t(), /*dilation=*/1);
  // The gates stay FP32 on every backend: the decay exp(g) compounds over the whole sequence.
  Buffer beta = Alloc(DType::kF32, {T, Hv}), g = Alloc(DType::kF32, {T, Hv});
  GdnGates(b, a, w.a_log, w.dt_bias, beta.t(), g.t());
  Buffer o = Alloc(act_dtype(), {T, z.dim(-1)});
  GdnDeltaRule(xc.t(), beta.t(), g.t(), state, o.t(), w.key_heads, w.key_dim, /*chunked=*/T > 1);
  GatedRmsNorm(o.t(), z, w.norm, y, w.sigmoid_gate, eps);
}

void Backend::NormRope(Tensor& x, const Tensor& w, const Tensor& positions, int64_t rotary_dim, double theta,
                       float eps, Tensor& cache) {
  RmsNorm(x, w, x, x.dim(-1), /*zero_centred=*/true, eps);
  Rope(x, positions, rotary_dim, theta);
  if (cache.data != nullptr) WriteRows(x, cache, positions);
}

void Backend::PrepareAttentionInputs(AttentionInputs& in, const Tensor& positions, int64_t rotary_dim, double theta,
                                     float eps) {
  Tensor none;
  WriteRows(in.v, in.v_cache, positions);  // V is cached raw
  NormRope(in.q, in.q_norm, positions, rotary_dim, theta, eps, none);
  NormRope(in.k, in.k_norm, positions, rotary_dim, theta, eps, in.k_cache);
  NormRope(in.iq, in.iq_norm, positions, rotary_dim, theta, eps, none);
  WriteRows(in.raw, in.raw_cache, positions);
}

void Backend::GatedSelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                                     const Tensor& positions, const Tensor& gate, Tensor& o, int64_t ratio) {
  SelectedAttention(q, kcache, vcache, sel, positions, o, ratio);
  Tensor flat = o.Reshaped({o.dim(0), o.dim(1) * o.dim(2)});
  SigmoidMul(flat, gate);
}

void Backend::ExpertsAndShared(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& experts,
                               const Tensor& shared_gu, const Tensor& shared_down, const Tensor& gate_logit,
                               Tensor& out) {
  const int64_t T = shared_gu.dim(0);
  Buffer act = Alloc(act_dtype(), {T, shared_down.dim(1)}), shared = Alloc(act_dtype(), {T, shared_down.dim(0)});
  SiluMul(shared_gu, act.t());
  Linear(act.t(), shared_down, shared.t());
  RoutedExperts(h, idx, w, experts, out);
  AddSigmoidGated(out, shared.t(), gate_logit);
}

}  // namespace q38
