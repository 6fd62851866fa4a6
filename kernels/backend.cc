// The op interface's default compositions (kernels/backend.h): a fused op that a backend does not
// fuse runs as the ops it stands for, in the order the model ran them before it was fused.
#include "kernels/backend.h"

#include "glog/logging.h"

namespace q38 {

void Backend::HcPre(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h,
                    Tensor& g, int64_t streams, float eps) {
  const int64_t T = X.dim(0), S = streams, H = h.dim(-1), R = up.dim(1), rows = down_inject.dim(0);
  CHECK(rows == R || rows == R + S) << "HcPre: " << rows << " down/inject rows for R = " << R << ", S = " << S;
  const bool inject = rows == R + S;
  Buffer xn = Alloc(act_dtype(), {T, S * H});
  RmsNorm(X, norm, xn.t(), H, /*zero_centred=*/true, eps);
  Buffer di = Alloc(act_dtype(), {T, rows});
  Linear(xn.t(), down_inject, di.t());
  Buffer a = Alloc(act_dtype(), {T, R});
  Tensor none;
  HcGates(di.t(), a.t(), inject ? g : none, S, inject);
  Buffer m = Alloc(act_dtype(), {T, S * H});
  Linear(a.t(), up, m.t());
  HcCombine(m.t(), xn.t(), h);
}

void Backend::NormRope(Tensor& x, const Tensor& w, const Tensor& positions, int64_t rotary_dim, double theta,
                       float eps, Tensor& cache) {
  RmsNorm(x, w, x, x.dim(-1), /*zero_centred=*/true, eps);
  Rope(x, positions, rotary_dim, theta);
  if (cache.data != nullptr) WriteRows(x, cache, positions);
}

void Backend::GatedSelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                                     const Tensor& positions, const Tensor& gate, Tensor& o, int64_t ratio) {
  SelectedAttention(q, kcache, vcache, sel, positions, o, ratio);
  Tensor flat = o.Reshaped({o.dim(0), o.dim(1) * o.dim(2)});
  SigmoidMul(flat, gate);
}

void Backend::ExpertsAndShared(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& experts,
                               const Tensor& shared, const Tensor& gate_logit, Tensor& out) {
  RoutedExperts(h, idx, w, experts, out);
  AddSigmoidGated(out, shared, gate_logit);
}

std::vector<Buffer> Backend::LinearStacked(const Tensor& x, const Tensor& w, const std::vector<int64_t>& rows) {
  const int64_t T = x.dim(0);
  std::vector<Buffer> parts;
  int64_t at = 0;
  if (T == 1) {
    const int64_t N = w.dim(0);
    Buffer all = Alloc(act_dtype(), {1, N});
    Linear(x, w, all.t());
    for (int64_t n : rows) {
      parts.push_back(all.View(all.t().Reshaped({N}).Rows(at, n).Reshaped({1, n})));
      at += n;
    }
    return parts;
  }
  for (int64_t n : rows) {
    parts.push_back(Alloc(act_dtype(), {T, n}));
    Linear(x, w.Rows(at, n), parts.back().t());
    at += n;
  }
  return parts;
}

void Backend::GdnBlock(const Tensor& h, const GdnLayer& w, Tensor& conv_state, Tensor& state, Tensor& out,
                       const Residual& residual) {
  const int64_t T = h.dim(0), C = w.conv.dim(0), Hv = w.a_log.numel(), Dv = Hv * w.norm.numel();
  CHECK_EQ(w.in.dim(0), C + Dv + 2 * Hv) << "GdnBlock: stacked rows";
  std::vector<Buffer> in = LinearStacked(h, w.in, {C, Dv, Hv, Hv});
  const Buffer &qkv = in[0], &z = in[1], &b = in[2], &a = in[3];
  Buffer xc = Alloc(act_dtype(), {T, C});
  CausalConv(qkv.t(), w.conv, conv_state, xc.t(), /*dilation=*/1);
  // The gates stay FP32 on every backend: the decay exp(g) compounds over the whole sequence.
  Buffer beta = Alloc(DType::kF32, {T, Hv}), g = Alloc(DType::kF32, {T, Hv});
  GdnGates(b.t(), a.t(), w.a_log, w.dt_bias, beta.t(), g.t());
  Buffer o = Alloc(act_dtype(), {T, Dv});
  GdnDeltaRule(xc.t(), beta.t(), g.t(), state, o.t(), w.key_heads, w.key_dim, /*chunked=*/T > 1);
  Buffer y = Alloc(act_dtype(), {T, Dv});
  GatedRmsNorm(o.t(), z.t(), w.norm, y.t(), w.sigmoid_gate, w.eps);
  Linear(y.t(), w.out, out);
  if (residual.X != nullptr) HcResidual(*residual.X, *residual.g, out);
}

void Backend::MoeBlock(const Tensor& h, const Tensor& in, int64_t experts_per_token, const Tensor& shared_down,
                       const ExpertWeights& experts, Tensor& out, const RoutingHook& hook, const Residual& residual) {
  const int64_t T = h.dim(0), H = h.dim(1), Is = shared_down.dim(1), E = in.dim(0) - 2 * Is - 1;
  CHECK(E >= 1 && experts_per_token <= E) << "MoeBlock: " << in.dim(0) << " stacked rows for Is = " << Is;
  std::vector<Buffer> parts = LinearStacked(h, in, {E, 2 * Is, 1});
  const Buffer &logits = parts[0], &gu = parts[1], &gate = parts[2];
  Buffer idx = Alloc(DType::kI32, {T, experts_per_token}), w = Alloc(act_dtype(), {T, experts_per_token});
  RouterTopK(logits.t(), idx.t(), w.t());
  if (hook) hook(logits.t(), idx.t(), w.t());
  Buffer act = Alloc(act_dtype(), {T, Is}), shared = Alloc(act_dtype(), {T, H});
  SiluMul(gu.t(), act.t());
  Linear(act.t(), shared_down, shared.t());
  ExpertsAndShared(h, idx.t(), w.t(), experts, shared.t(), gate.t(), out);
  if (residual.X != nullptr) HcResidual(*residual.X, *residual.g, out);
}

}  // namespace q38
