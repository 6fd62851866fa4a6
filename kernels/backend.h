// The op interface the model is written against (DESIGN.md §3). The CPU backend implements it
// plainly in FP32 as the numerical reference; the CUDA backend implements the same ops with
// SM70 kernels. Tensors passed in live in the backend's memory (Alloc/Upload).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace q38 {

// Backend memory with its view. Copies share the allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tensor view, std::shared_ptr<void> storage) : view_(std::move(view)), storage_(std::move(storage)) {}
  const Tensor& t() const { return view_; }
  Tensor& t() { return view_; }
  explicit operator bool() const { return view_.data != nullptr || view_.numel() == 0; }

 private:
  Tensor view_;
  std::shared_ptr<void> storage_;
};

// Routed experts of one layer in ModelOpt NVFP4, fused gate|up (2I rows) and down (H rows).
struct Nvfp4ExpertWeights {
  Buffer gate_up_codes, gate_up_scales, down_codes, down_scales;  // U8
  Buffer gate_global, up_global, down_global;                     // F32 [E]
};
// Routed experts of one layer as dense weights (the official BF16 release).
struct DenseExpertWeights {
  Buffer gate_up;  // [E, 2I, H]
  Buffer down;     // [E, H, I]
};
struct ExpertWeights {
  bool nvfp4 = true;
  Nvfp4ExpertWeights q;
  DenseExpertWeights dense;
  int64_t intermediate = 0;  // I on this rank
};

// The n-gram table stays in host memory on every backend (DESIGN.md §6).
// The checkpoint stores it in shards of equal row counts, concatenated by shard index.
struct PleTableView {
  std::vector<const uint8_t*> shards;
  int64_t rows_per_shard = 0;
  DType dtype = DType::kF8E4M3;
  int64_t row_width = 0;
  float scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory. Activations use act_dtype(); Upload converts FP32 host data to the backend's weight
  // format, UploadRaw copies bytes (codes, scales, ids).
  virtual DType act_dtype() const = 0;
  virtual Buffer Alloc(DType dtype, std::vector<int64_t> shape) = 0;
  virtual Buffer Upload(const std::vector<float>& host, std::vector<int64_t> shape) = 0;
  virtual Buffer UploadRaw(const void* host, DType dtype, std::vector<int64_t> shape) = 0;
  virtual void CopyToHost(const Tensor& src, void* host) = 0;  // activations arrive as FP32
  virtual void CopyFromHost(const void* host, Tensor& dst) = 0;
  virtual void Copy(const Tensor& src, Tensor& dst) = 0;
  virtual void Fill(Tensor& dst, float value) = 0;

  // Dense and elementwise.
  virtual void Linear(const Tensor& x, const Tensor& w, Tensor& y) = 0;  // y[T,N] = x[T,K]·w[N,K]ᵀ
  virtual void Add(Tensor& x, const Tensor& y) = 0;                       // x += y
  virtual void SigmoidMul(Tensor& x, const Tensor& gate) = 0;             // x *= sigmoid(gate)
  virtual void SiluMul(const Tensor& gu, Tensor& y) = 0;                  // y = silu(gu[:, :I])·gu[:, I:]

  // Norms (kernels/norm): group = span of one normalization; w has row or group length.
  virtual void RmsNorm(const Tensor& x, const Tensor& w, Tensor& y, int64_t group,
                       bool zero_centred, float eps) = 0;
  virtual void GatedRmsNorm(const Tensor& o, const Tensor& z, const Tensor& w, Tensor& y,
                            bool sigmoid_gate, float eps) = 0;

  // x [T, heads, head_dim] in place; positions I64 [T].
  virtual void Rope(Tensor& x, const Tensor& positions, int64_t rotary_dim, double theta) = 0;
  // x [T, C], w [C, K], state [(K-1)·dilation, C], y [T, C].
  virtual void CausalConv(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y, int64_t dilation) = 0;

  // Gated DeltaNet: b, a [T, Hv] → beta, g; qkv [T, 2·Hk·dk + Hv·dv] from the conv;
  // state F32 [Hv, dk, dv]; o [T, Hv·dv]. chunked selects the prefill form.
  virtual void GdnGates(const Tensor& b, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias,
                        Tensor& beta, Tensor& g) = 0;
  virtual void GdnDeltaRule(const Tensor& qkv, const Tensor& beta, const Tensor& g, Tensor& state,
                            Tensor& o, int64_t key_heads, int64_t key_dim, bool chunked) = 0;

  // QSA (kernels/attention).
  virtual void IndexerPoolBlocks(const Tensor& raw_keys, const Tensor& knorm_w, Tensor& pooled,
                                 int64_t first, int64_t count, int64_t ratio, float eps,
                                 int64_t rotary_dim, double theta) = 0;
  virtual void IndexerSelect(const Tensor& iq, const Tensor& pooled, const Tensor& positions,
                             Tensor& sel, int64_t ratio) = 0;
  virtual void SelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache,
                                 const Tensor& sel, const Tensor& positions, Tensor& o, int64_t ratio) = 0;

  // MoE (kernels/moe).
  virtual void RouterTopK(const Tensor& logits, Tensor& idx, Tensor& w) = 0;
  virtual void RoutedExperts(const Tensor& h, const Tensor& idx, const Tensor& w,
                             const ExpertWeights& experts, Tensor& out) = 0;
  virtual void AddSigmoidGated(Tensor& out, const Tensor& shared, const Tensor& gate_logit) = 0;

  // Hyper-connections (kernels/hc).
  virtual void EmbedStreams(const Tensor& table, const Tensor& ids, Tensor& X, int64_t streams) = 0;
  virtual void HcGates(const Tensor& di, Tensor& a, Tensor& g, int64_t streams, bool inject) = 0;
  virtual void HcCombine(const Tensor& m, const Tensor& xn, Tensor& h) = 0;
  virtual void HcResidual(Tensor& X, const Tensor& g, const Tensor& y) = 0;

  // PLE (kernels/ple): rows I64 [T, heads] index the host table.
  virtual void PleGather(const PleTableView& table, const std::vector<int64_t>& rows, Tensor& E) = 0;
  virtual void PleGate(const Tensor& kn, const Tensor& qn, const Tensor& v, Tensor& G) = 0;

  // Waits for queued work (a no-op on the CPU).
  virtual void Synchronize() = 0;
};

std::unique_ptr<Backend> MakeCpuBackend();

}  // namespace q38
