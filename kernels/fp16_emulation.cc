#include "kernels/fp16_emulation.h"

#include <cstdint>
#include <map>
#include <utility>

#include "common/dtype.h"

namespace q38 {
namespace {

// Forwards every op to the CPU backend, then rounds the outputs that are activations. The model
// asks for activations in act_dtype() = F16; they are F32 buffers whose address ranges are
// remembered while they live, so that views into them (cache rows, stream slices) are found too.
class Fp16Emulation final : public Backend {
 public:
  explicit Fp16Emulation(std::set<std::string> exact_ops) : cpu_(MakeCpuBackend()), exact_(std::move(exact_ops)) {}

  std::string name() const override { return "cpu-fp16"; }
  DType act_dtype() const override { return DType::kF16; }
  Buffer Alloc(DType dtype, std::vector<int64_t> shape) override {
    if (dtype != DType::kF16) return cpu_->Alloc(dtype, std::move(shape));
    Buffer b = cpu_->Alloc(DType::kF32, std::move(shape));
    const uintptr_t start = reinterpret_cast<uintptr_t>(b.t().data);
    (*spans_)[start] = static_cast<size_t>(b.t().numel()) * sizeof(float);
    // The span goes with the memory, so a later FP32 buffer at the same address is not rounded.
    Tensor view = b.t();
    return Buffer(view, std::shared_ptr<void>(view.data, [b, spans = spans_, start](void*) { spans->erase(start); }));
  }
  Buffer AllocStaging(DType dtype, std::vector<int64_t> shape) override { return cpu_->AllocStaging(dtype, shape); }
  Buffer Upload(const std::vector<float>& host, std::vector<int64_t> shape) override {
    if (exact_.count("Upload")) return cpu_->Upload(host, std::move(shape));
    std::vector<float> rounded = host;
    for (float& v : rounded) v = Fp16ToFloat(FloatToFp16(v));
    return cpu_->Upload(rounded, std::move(shape));
  }
  Buffer UploadF32(const std::vector<float>& host, std::vector<int64_t> shape) override {
    return cpu_->UploadF32(host, std::move(shape));
  }
  Buffer UploadRaw(const void* host, DType dtype, std::vector<int64_t> shape) override {
    return cpu_->UploadRaw(host, dtype, std::move(shape));
  }
  int64_t overflow_count() const override { return cpu_->overflow_count(); }
  void CopyToHost(const Tensor& src, void* host) override { cpu_->CopyToHost(src, host); }
  void CopyFromHost(const void* host, Tensor& dst) override {
    cpu_->CopyFromHost(host, dst);
    Round(dst, "CopyFromHost");
  }
  void Copy(const Tensor& src, Tensor& dst) override {
    cpu_->Copy(src, dst);
    Round(dst, "Copy");
  }
  void Fill(Tensor& dst, float value) override {
    cpu_->Fill(dst, value);
    Round(dst, "Fill");
  }
  void FillRandom(Tensor& dst, uint64_t seed, float spread) override {
    cpu_->FillRandom(dst, seed, spread);
    Round(dst, "FillRandom");
  }
  void WriteRows(const Tensor& src, Tensor& cache, const Tensor& positions) override {
    cpu_->WriteRows(src, cache, positions);
    Round(cache, "WriteRows");
  }
  void Linear(const Tensor& x, const Tensor& w, Tensor& y) override {
    cpu_->Linear(x, w, y);
    Round(y, "Linear");
  }
  void Add(Tensor& x, const Tensor& y) override {
    cpu_->Add(x, y);
    Round(x, "Add");
  }
  void SigmoidMul(Tensor& x, const Tensor& gate) override {
    cpu_->SigmoidMul(x, gate);
    Round(x, "SigmoidMul");
  }
  void SiluMul(const Tensor& gu, Tensor& y) override {
    cpu_->SiluMul(gu, y);
    Round(y, "SiluMul");
  }
  void RmsNorm(const Tensor& x, const Tensor& w, Tensor& y, int64_t group, bool zero_centred, float eps) override {
    cpu_->RmsNorm(x, w, y, group, zero_centred, eps);
    Round(y, "RmsNorm");
  }
  void GatedRmsNorm(const Tensor& o, const Tensor& z, const Tensor& w, Tensor& y, bool sigmoid_gate,
                    float eps) override {
    cpu_->GatedRmsNorm(o, z, w, y, sigmoid_gate, eps);
    Round(y, "GatedRmsNorm");
  }
  void Rope(Tensor& x, const Tensor& positions, int64_t rotary_dim, double theta) override {
    cpu_->Rope(x, positions, rotary_dim, theta);
    Round(x, "Rope");
  }
  void CausalConv(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y, int64_t dilation) override {
    cpu_->CausalConv(x, w, state, y, dilation);
    Round(state, "CausalConv");
    Round(y, "CausalConv");
  }
  void GdnGates(const Tensor& b, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias, Tensor& beta,
                Tensor& g) override {
    cpu_->GdnGates(b, a, a_log, dt_bias, beta, g);
    Round(beta, "GdnGates");
    Round(g, "GdnGates");
  }
  void GdnDeltaRule(const Tensor& qkv, const Tensor& beta, const Tensor& g, Tensor& state, Tensor& o,
                    int64_t key_heads, int64_t key_dim, bool chunked) override {
    cpu_->GdnDeltaRule(qkv, beta, g, state, o, key_heads, key_dim, chunked);
    Round(state, "GdnDeltaRule");
    Round(o, "GdnDeltaRule");
  }
  void IndexerPoolBlocks(const Tensor& raw_keys, const Tensor& knorm_w, Tensor& pooled, const Tensor& positions,
                         int64_t ratio, float eps, int64_t rotary_dim, double theta) override {
    cpu_->IndexerPoolBlocks(raw_keys, knorm_w, pooled, positions, ratio, eps, rotary_dim, theta);
    Round(pooled, "IndexerPoolBlocks");
  }
  void IndexerSelect(const Tensor& iq, const Tensor& pooled, const Tensor& positions, Tensor& sel,
                     int64_t ratio) override {
    cpu_->IndexerSelect(iq, pooled, positions, sel, ratio);
  }
  void SelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                         const Tensor& positions, Tensor& o, int64_t ratio) override {
    cpu_->SelectedAttention(q, kcache, vcache, sel, positions, o, ratio);
    Round(o, "SelectedAttention");
  }
  void RouterTopK(const Tensor& logits, Tensor& idx, Tensor& w) override {
    cpu_->RouterTopK(logits, idx, w);
    Round(w, "RouterTopK");
  }
  void RoutedExperts(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& experts,
                     Tensor& out) override {
    cpu_->RoutedExperts(h, idx, w, experts, out);
    Round(out, "RoutedExperts");
  }
  void AddSigmoidGated(Tensor& out, const Tensor& shared, const Tensor& gate_logit) override {
    cpu_->AddSigmoidGated(out, shared, gate_logit);
    Round(out, "AddSigmoidGated");
  }
  void EmbedStreams(const Tensor& table, const Tensor& ids, Tensor& X, int64_t streams) override {
    cpu_->EmbedStreams(table, ids, X, streams);
    Round(X, "EmbedStreams");
  }
  void HcGates(const Tensor& di, Tensor& a, Tensor& g, int64_t streams, bool inject) override {
    cpu_->HcGates(di, a, g, streams, inject);
    Round(a, "HcGates");
    Round(g, "HcGates");
  }
  void HcCombine(const Tensor& m, const Tensor& xn, Tensor& h) override {
    cpu_->HcCombine(m, xn, h);
    Round(h, "HcCombine");
  }
  void HcResidual(Tensor& X, const Tensor& g, const Tensor& y) override {
    cpu_->HcResidual(X, g, y);
    Round(X, "HcResidual");
  }
  // HcPre: Backend's composition through the rounded ops above, as the model ran it unfused.
  // ArgMax reads logits already rounded and writes a value among them and an index.
  void ArgMax(const Tensor& logits, int64_t valid, Tensor& out) override { cpu_->ArgMax(logits, valid, out); }
  void TopLogits(const Tensor& logits, int64_t valid, int64_t k, Tensor& out) override {
    cpu_->TopLogits(logits, valid, k, out);
  }
  void PleLoad(const Tensor& staged, float scale, Tensor& E) override {
    cpu_->PleLoad(staged, scale, E);
    Round(E, "PleLoad");
  }
  void PleGate(const Tensor& kn, const Tensor& qn, const Tensor& v, Tensor& G) override {
    cpu_->PleGate(kn, qn, v, G);
    Round(G, "PleGate");
  }
  absl::StatusOr<std::unique_ptr<StepGraph>> Capture(const std::function<absl::Status()>& body) override {
    return cpu_->Capture(body);
  }
  absl::Status Synchronize() override { return cpu_->Synchronize(); }

 private:
  // Rounds t to FP16 values if it lies in an activation buffer and `op` is not left exact.
  void Round(const Tensor& t, const char* op) {
    if (t.dtype != DType::kF32 || exact_.count(op)) return;
    const uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
    auto it = spans_->upper_bound(p);
    if (it == spans_->begin() || p >= std::prev(it)->first + std::prev(it)->second) return;
    float* f = static_cast<float*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) f[i] = Fp16ToFloat(FloatToFp16(f[i]));
  }

  std::unique_ptr<Backend> cpu_;
  std::set<std::string> exact_;
  // Live activation buffers: start address → bytes.
  std::shared_ptr<std::map<uintptr_t, size_t>> spans_ = std::make_shared<std::map<uintptr_t, size_t>>();
};

}  // namespace

const std::vector<std::string>& Fp16EmulationOps() {
  static const std::vector<std::string> ops = {
      "Upload",       "CopyFromHost",      "Copy",          "Fill",         "FillRandom",      "WriteRows",
      "Linear",       "Add",               "SigmoidMul",    "SiluMul",      "RmsNorm",         "GatedRmsNorm",
      "Rope",         "CausalConv",        "GdnGates",      "GdnDeltaRule", "IndexerPoolBlocks", "SelectedAttention",
      "RouterTopK",   "RoutedExperts",     "AddSigmoidGated", "EmbedStreams", "HcGates",       "HcCombine",
      "HcResidual",   "PleLoad",           "PleGate"};
  return ops;
}

std::unique_ptr<Backend> MakeFp16EmulationBackend(std::set<std::string> exact_ops) {
  return std::make_unique<Fp16Emulation>(std::move(exact_ops));
}

}  // namespace q38
