// The CPU backend: FP32 activations and weights, every op a call into its plain reference, or for
// the products (dense and routed experts) into their fast FP32 forms (CpuMath::kFast).
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "glog/logging.h"
#include "kernels/attention/attention.h"
#include "kernels/backend.h"
#include "kernels/conv/conv.h"
#include "kernels/cpu_pool.h"
#include "kernels/gdn/gdn.h"
#include "kernels/hc/hc.h"
#include "kernels/linear/linear.h"
#include "kernels/logits/logits.h"
#include "kernels/moe/moe.h"
#include "kernels/norm/norm.h"
#include "kernels/ple/ple.h"
#include "kernels/rope/rope.h"
#include "kernels/activation.h"
#include "common/splitmix64.h"

namespace q38 {
namespace {

float* F(const Tensor& t) {
  CHECK(t.dtype == DType::kF32) << "CPU backend expects F32, got " << DTypeName(t.dtype);
  return t.as<float>();
}
int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

class CpuBackend final : public Backend {
 public:
  CpuBackend(CpuMath math, int threads) : fast_(math == CpuMath::kFast) {
    if (fast_ && threads > 1) pool_ = std::make_unique<CpuPool>(threads);
  }
  std::string name() const override { return fast_ ? "cpu_fast" : "cpu"; }
  DType act_dtype() const override { return DType::kF32; }

  Buffer Alloc(DType dtype, std::vector<int64_t> shape) override {
    Tensor t{nullptr, dtype, std::move(shape)};
    auto storage = std::shared_ptr<void>(new char[std::max<size_t>(t.nbytes(), 1)](),
                                         [](void* p) { delete[] static_cast<char*>(p); });
    t.data = storage.get();
    return Buffer(std::move(t), std::move(storage));
  }
  Buffer AllocStaging(DType dtype, std::vector<int64_t> shape) override { return Alloc(dtype, std::move(shape)); }
  Buffer Upload(const std::vector<float>& host, std::vector<int64_t> shape) override {
    Buffer b = Alloc(DType::kF32, std::move(shape));
    CHECK_EQ(static_cast<size_t>(b.t().numel()), host.size());
    std::memcpy(b.t().data, host.data(), host.size() * sizeof(float));
    return b;
  }
  Buffer UploadF32(const std::vector<float>& host, std::vector<int64_t> shape) override {
    return Upload(host, std::move(shape));
  }
  int64_t overflow_count() const override { return 0; }
  Buffer UploadRaw(const void* host, DType dtype, std::vector<int64_t> shape) override {
    Buffer b = Alloc(dtype, std::move(shape));
    std::memcpy(b.t().data, host, b.t().nbytes());
    return b;
  }
  void CopyToHost(const Tensor& src, void* host) override { std::memcpy(host, src.data, src.nbytes()); }
  void CopyFromHost(const void* host, Tensor& dst) override { std::memcpy(dst.data, host, dst.nbytes()); }
  void Copy(const Tensor& src, Tensor& dst) override {
    CHECK_EQ(src.nbytes(), dst.nbytes());
    std::memmove(dst.data, src.data, src.nbytes());
  }
  void Fill(Tensor& dst, float value) override { std::fill(F(dst), F(dst) + dst.numel(), value); }
  void FillRandom(Tensor& dst, uint64_t seed, float spread) override {
    for (int64_t i = 0; i < dst.numel(); ++i) {
      switch (dst.dtype) {
        case DType::kU8:
          dst.as<uint8_t>()[i] = SyntheticByte(seed, i);
          break;
        case DType::kF8E4M3:
          dst.as<uint8_t>()[i] = SyntheticScaleByte(seed, i);
          break;
        default:
          F(dst)[i] = SyntheticUniform(seed, i, spread);
      }
    }
  }
  void WriteRows(const Tensor& src, Tensor& cache, const Tensor& positions) override {
    const int64_t row = src.row_size();
    for (int64_t t = 0; t < src.dim(0); ++t) {
      std::copy_n(F(src) + t * row, row, F(cache) + positions.as<int64_t>()[t] * row);
    }
  }

  void Linear(const Tensor& x, const Tensor& w, Tensor& y) override {
    CHECK_EQ(x.dim(-1), w.dim(1));
    const int64_t T = Rows(x), K = w.dim(1), N = w.dim(0);
    if (fast_ && pool_ && T * N * K >= kParallelMacs) {
      // Contiguous runs of rows, a multiple of four (LinearFast's row block) each.
      const int parts = pool_->threads();
      const int64_t per = (N + 4 * parts - 1) / (4 * parts) * 4;
      pool_->Run([&](int p) {
        const int64_t n0 = std::min(N, p * per), n1 = std::min(N, n0 + per);
        cpu::LinearFast(F(x), F(w) + n0 * K, F(y) + n0, T, K, n1 - n0, N);
      });
    } else if (fast_) {
      cpu::LinearFast(F(x), F(w), F(y), T, K, N, N);
    } else {
      cpu::Linear(F(x), F(w), F(y), Rows(x), w.dim(1), w.dim(0));
    }
  }
  void Add(Tensor& x, const Tensor& y) override {
    for (int64_t i = 0; i < x.numel(); ++i) F(x)[i] += F(y)[i];
  }
  void SigmoidMul(Tensor& x, const Tensor& gate) override {
    for (int64_t i = 0; i < x.numel(); ++i) F(x)[i] *= cpu::Sigmoid(F(gate)[i]);
  }
  void SiluMul(const Tensor& gu, Tensor& y) override { cpu::SiluMul(F(gu), F(y), Rows(y), y.dim(-1)); }

  void RmsNorm(const Tensor& x, const Tensor& w, Tensor& y, int64_t group, bool zero_centred,
               float eps) override {
    cpu::RmsNorm(F(x), F(w), F(y), Rows(x), x.dim(-1), group, w.numel(), eps, zero_centred);
  }
  void GatedRmsNorm(const Tensor& o, const Tensor& z, const Tensor& w, Tensor& y, bool sigmoid_gate,
                    float eps) override {
    cpu::GatedRmsNorm(F(o), F(z), F(w), F(y), Rows(o), o.dim(-1), w.numel(), eps, sigmoid_gate);
  }

  void Rope(Tensor& x, const Tensor& positions, int64_t rotary_dim, double theta) override {
    cpu::Rope(F(x), positions.as<int64_t>(), x.dim(0), x.dim(1), x.dim(2), rotary_dim, theta);
  }
  void CausalConv(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y, int64_t dilation) override {
    cpu::CausalConv(F(x), F(w), F(state), F(y), Rows(x), x.dim(-1), w.dim(1), dilation);
  }

  void GdnGates(const Tensor& b, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias,
                Tensor& beta, Tensor& g) override {
    cpu::GdnGates(F(b), F(a), F(a_log), F(dt_bias), F(beta), F(g), Rows(b), b.dim(-1));
  }
  void GdnDeltaRule(const Tensor& qkv, const Tensor& beta, const Tensor& g, Tensor& state, Tensor& o,
                    int64_t key_heads, int64_t key_dim, bool chunked) override {
    const cpu::GdnDims d{key_heads, state.dim(0), key_dim, state.dim(2)};
    const int64_t T = Rows(qkv), width = qkv.dim(-1), qk = key_heads * key_dim, vw = d.value_heads * d.value_dim;
    // The conv output packs q | k | v per token; the reference takes them apart.
    std::vector<float> q(T * qk), k(T * qk), v(T * vw);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = F(qkv) + t * width;
      std::copy(row, row + qk, q.data() + t * qk);
      std::copy(row + qk, row + 2 * qk, k.data() + t * qk);
      std::copy(row + 2 * qk, row + 2 * qk + vw, v.data() + t * vw);
    }
    if (chunked) {
      cpu::GdnChunked(q.data(), k.data(), v.data(), F(beta), F(g), F(state), F(o), T, d);
    } else {
      cpu::GdnRecurrent(q.data(), k.data(), v.data(), F(beta), F(g), F(state), F(o), T, d);
    }
  }

  void IndexerPoolBlocks(const Tensor& raw_keys, const Tensor& knorm_w, Tensor& pooled, const Tensor& positions,
                         int64_t ratio, float eps, int64_t rotary_dim, double theta) override {
    for (int64_t t = 0; t < positions.numel(); ++t) {
      const int64_t end = positions.as<int64_t>()[t] + 1;
      if (end % ratio != 0) continue;
      cpu::IndexerPoolBlocks(F(raw_keys), F(knorm_w), F(pooled), end / ratio - 1, 1, raw_keys.dim(-1), ratio, eps,
                             rotary_dim, theta);
    }
  }
  void IndexerSelect(const Tensor& iq, const Tensor& pooled, const Tensor& positions, Tensor& sel,
                     int64_t ratio) override {
    cpu::IndexerSelect(F(iq), F(pooled), positions.as<int64_t>(), sel.as<int32_t>(), iq.dim(0),
                       iq.dim(1), iq.dim(2), ratio, sel.dim(1));
  }
  void SelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                         const Tensor& positions, Tensor& o, int64_t ratio) override {
    const cpu::AttentionDims d{q.dim(1), kcache.dim(1), q.dim(2), ratio, sel.dim(1)};
    cpu::SelectedAttention(F(q), F(kcache), F(vcache), sel.as<int32_t>(), positions.as<int64_t>(),
                           F(o), q.dim(0), d);
  }

  void RouterTopK(const Tensor& logits, Tensor& idx, Tensor& w) override {
    cpu::RouterTopK(F(logits), idx.as<int32_t>(), F(w), Rows(logits), logits.dim(-1), idx.dim(-1));
  }
  void RoutedExperts(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& e,
                     Tensor& out) override {
    const int64_t T = Rows(h), k = idx.dim(-1), H = h.dim(-1), I = e.intermediate;
    if (!e.nvfp4) {
      const cpu::DenseExperts gu{F(e.dense.gate_up.t()), 2 * I, H}, dn{F(e.dense.down.t()), H, I};
      Experts(F(h), idx.as<int32_t>(), F(w), gu, dn, F(out), T, k);
      return;
    }
    const Nvfp4ExpertWeights& q = e.q;
    const cpu::Nvfp4Experts gu{q.gate_up_codes.t().as<uint8_t>(), q.gate_up_scales.t().as<uint8_t>(),
                               F(q.gate_global.t()), F(q.up_global.t()), I, 2 * I, H};
    const cpu::Nvfp4Experts dn{q.down_codes.t().as<uint8_t>(), q.down_scales.t().as<uint8_t>(),
                               F(q.down_global.t()), F(q.down_global.t()), H, H, I};
    Experts(F(h), idx.as<int32_t>(), F(w), gu, dn, F(out), T, k);
  }
  void AddSigmoidGated(Tensor& out, const Tensor& shared, const Tensor& gate_logit) override {
    cpu::AddSigmoidGated(F(out), F(shared), F(gate_logit), gate_logit.dim(-1), Rows(out), out.dim(-1));
  }

  void EmbedStreams(const Tensor& table, const Tensor& ids, Tensor& X, int64_t streams) override {
    cpu::EmbedStreams(F(table), ids.as<int32_t>(), F(X), ids.numel(), streams, table.dim(1));
  }
  void HcGates(const Tensor& di, Tensor& a, Tensor& g, int64_t streams, bool inject) override {
    cpu::HcGates(F(di), F(a), inject ? F(g) : nullptr, Rows(di), a.dim(-1), streams, inject);
  }
  void HcCombine(const Tensor& m, const Tensor& xn, Tensor& h) override {
    cpu::HcCombine(F(m), F(xn), F(h), Rows(h), m.dim(-1) / h.dim(-1), h.dim(-1));
  }
  void HcResidual(Tensor& X, const Tensor& g, const Tensor& y) override {
    cpu::HcResidual(F(X), F(g), F(y), Rows(y), g.dim(-1), y.dim(-1));
  }
  void HcPre(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g,
             int64_t streams, float eps) override {
    const int64_t R = up.dim(1), rows = down_inject.dim(0);
    CHECK(rows == R || rows == R + streams) << "HcPre: " << rows << " down/inject rows for R = " << R;
    const bool inject = rows == R + streams;
    if (fast_) return Backend::HcPre(X, norm, down_inject, up, h, g, streams, eps);  // the composition, on the fast Linear
    cpu::HcPre(F(X), F(norm), norm.numel(), F(down_inject), F(up), F(h), inject ? F(g) : nullptr, X.dim(0), streams,
               h.dim(-1), R, inject, eps);
  }
  void ArgMax(const Tensor& logits, int64_t valid, Tensor& out) override {
    CHECK(Rows(logits) == 1 && valid >= 0 && valid <= logits.dim(-1) && out.numel() == 2);
    cpu::ArgMax(F(logits), valid, F(out));
  }
  void TopLogits(const Tensor& logits, int64_t valid, int64_t k, Tensor& out) override {
    CHECK(Rows(logits) == 1 && valid >= 0 && valid <= logits.dim(-1) && out.numel() == 2 * k + 2);
    cpu::TopLogits(F(logits), valid, k, F(out));
  }

  void PleLoad(const Tensor& staged, float scale, Tensor& E) override {
    cpu::PleLoad(staged.as<uint8_t>(), staged.dtype, scale, F(E), E.numel());
  }
  void PleGate(const Tensor& kn, const Tensor& qn, const Tensor& v, Tensor& G) override {
    cpu::PleGate(F(kn), F(qn), F(v), F(G), Rows(v), kn.dim(-1) / v.dim(-1), v.dim(-1));
  }

  absl::StatusOr<std::unique_ptr<StepGraph>> Capture(const std::function<absl::Status()>& body) override {
    return std::make_unique<Rerun>(body);
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  template <typename Weights>
  void Experts(const float* h, const int32_t* idx, const float* w, const Weights& gu, const Weights& dn, float* out,
               int64_t T, int64_t k) {
    if (fast_) {
      cpu::RoutedExpertsFast(h, idx, w, gu, dn, out, T, k);
    } else {
      cpu::RoutedExperts(h, idx, w, gu, dn, out, T, k);
    }
  }

  // Below this many multiply-adds a product is not worth waking the workers for.
  static constexpr int64_t kParallelMacs = int64_t{1} << 16;
  bool fast_;
  std::unique_ptr<CpuPool> pool_;

  // Nothing to record on the CPU: a replay runs the body again.
  class Rerun final : public StepGraph {
   public:
    explicit Rerun(std::function<absl::Status()> body) : body_(std::move(body)) {}
    absl::Status Replay() override { return body_(); }

   private:
    std::function<absl::Status()> body_;
  };
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(CpuMath math, int threads) { return std::make_unique<CpuBackend>(math, threads); }

int CpuThreadsPerRank(int ranks) {
  // Past a few threads a one-token step's products are too small to split further.
  constexpr int kMostThreads = 8;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, ranks), 1, kMostThreads);
}

absl::StatusOr<CpuMath> ParseCpuMath(const std::string& name) {
  if (name == "exact") return CpuMath::kExact;
  if (name == "fast") return CpuMath::kFast;
  return absl::InvalidArgumentError("cpu math: expected exact or fast, got " + name);
}

}  // namespace q38
