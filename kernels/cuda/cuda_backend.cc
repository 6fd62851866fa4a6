#include "kernels/cuda/cuda_backend.h"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/gdn/gdn_cuda.h"
#include "kernels/hc/hc_cuda.h"
#include "kernels/linear/linear_cuda.h"
#include "kernels/logits/logits_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/ple/ple_cuda.h"
#include "kernels/rope/rope_cuda.h"

namespace q38 {
namespace {

__half* H(const Tensor& t) {
  CHECK(t.dtype == DType::kF16) << "CUDA backend expects F16 here, got " << DTypeName(t.dtype);
  return t.as<__half>();
}
float* F(const Tensor& t) {
  CHECK(t.dtype == DType::kF32) << "CUDA backend expects F32 here, got " << DTypeName(t.dtype);
  return t.as<float>();
}
int32_t* I32(const Tensor& t) {
  CHECK(t.dtype == DType::kI32) << "expected I32, got " << DTypeName(t.dtype);
  return t.as<int32_t>();
}
int64_t* I64(const Tensor& t) {
  CHECK(t.dtype == DType::kI64) << "expected I64, got " << DTypeName(t.dtype);
  return t.as<int64_t>();
}
int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

std::string UuidString(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                         b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

// Kernel nodes of a recorded graph (NCCL's kernels included); −1 if the graph cannot be read.
int64_t CountKernels(cudaGraph_t graph) {
  size_t n = 0;
  if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) return -1;
  std::vector<cudaGraphNode_t> nodes(n);
  if (cudaGraphGetNodes(graph, nodes.data(), &n) != cudaSuccess) return -1;
  int64_t kernels = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

// A captured decode step: the executable graph and the private pool its buffers came from.
class CudaGraph final : public StepGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::shared_ptr<cuda::DevicePool> pool, cudaStream_t stream)
      : exec_(exec), pool_(std::move(pool)), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  absl::Status Replay() override { return CudaStatus(cudaGraphLaunch(exec_, stream_), "graph launch"); }

 private:
  cudaGraphExec_t exec_;
  std::shared_ptr<cuda::DevicePool> pool_;
  cudaStream_t stream_;
};

// Pinned, device-mapped host memory, cached by rounded size like device blocks: pinning is slow
// and freeing it synchronizes the device. Callers refill a block only after a synchronizing copy,
// so no kernel still reads what they overwrite.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  ~StagingPool() {
    for (auto& [bytes, p] : free_) cudaFreeHost(p);
  }
  std::shared_ptr<void> Allocate(size_t bytes) {
    const size_t rounded = cuda::RoundBlock(bytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
      }
    }
    if (p == nullptr) {
      Q38_CUDA_CHECK(cudaHostAlloc(&p, rounded, cudaHostAllocMapped));
      void* device_view = nullptr;
      Q38_CUDA_CHECK(cudaHostGetDevicePointer(&device_view, p, 0));
      CHECK_EQ(device_view, p) << "staging memory needs unified addressing";
    }
    std::shared_ptr<StagingPool> self = shared_from_this();
    return std::shared_ptr<void>(p, [self, rounded](void* q) {
      std::lock_guard<std::mutex> l(self->mu_);
      self->free_.emplace(rounded, q);
    });
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
};

// Backends of this process on each device. A kernel with grid-wide barriers (IndexerSelectGrid)
// takes every block the device holds; two launched at once from two streams of one process could
// each hold part of the device and wait on the other, so a backend runs them
// only while it is alone on its device. (Processes sharing a GPU without MPS take turns in time
// slices.) The check is made when an op runs, so a graph recorded while alone keeps its
// cooperative kernels: backends of one process that share a device are created together, before
// any step is recorded.
class DeviceTenants {
 public:
  static void Enter(int ordinal) { Adjust(ordinal, 1); }
  static void Leave(int ordinal) { Adjust(ordinal, -1); }
  static bool Alone(int ordinal) {
    std::lock_guard<std::mutex> l(mu());
    return counts()[ordinal] == 1;
  }

 private:
  static void Adjust(int ordinal, int by) {
    std::lock_guard<std::mutex> l(mu());
    counts()[ordinal] += by;
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<int, int>& counts() {
    static std::map<int, int> c;
    return c;
  }
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(CudaDeviceInfo info, cudaStream_t stream, GridKernels grid)
      : info_(std::move(info)), stream_(stream), grid_(grid) {
    DeviceTenants::Enter(info_.ordinal);
    // Outside the allocator, which step graphs borrow from: the counters outlive every graph.
    Q38_CUDA_CHECK(cudaMalloc(&arrivals_, kArrivals * sizeof(int)));
    Q38_CUDA_CHECK(cudaMemsetAsync(arrivals_, 0, kArrivals * sizeof(int), stream_));
    Q38_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaFree(arrivals_);
    DeviceTenants::Leave(info_.ordinal);
  }

  std::string name() const override { return "cuda"; }
  DType act_dtype() const override { return DType::kF16; }
  cudaStream_t stream() const override { return stream_; }
  const CudaDeviceInfo& device() const override { return info_; }
  size_t reserved_bytes() const override { return allocator_.reserved(); }
  const GridKernels& grid_kernels() const override { return grid_; }
  int64_t overflow_count() const override { return overflow_; }

  Buffer Alloc(DType dtype, std::vector<int64_t> shape) override {
    Tensor t{nullptr, dtype, std::move(shape)};
    std::shared_ptr<void> storage = allocator_.Allocate(t.nbytes());
    t.data = storage.get();
    return Buffer(std::move(t), std::move(storage));
  }
  Buffer AllocStaging(DType dtype, std::vector<int64_t> shape) override {
    Tensor t{nullptr, dtype, std::move(shape)};
    std::shared_ptr<void> storage = staging_->Allocate(t.nbytes());
    t.data = storage.get();
    return Buffer(std::move(t), std::move(storage));
  }
  Buffer Upload(const std::vector<float>& host, std::vector<int64_t> shape) override {
    std::vector<uint16_t> half(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      half[i] = FloatToFp16(host[i]);
      if (std::isfinite(host[i]) && std::isinf(Fp16ToFloat(half[i]))) ++overflow_;
    }
    return UploadRaw(half.data(), DType::kF16, std::move(shape));
  }
  Buffer UploadF32(const std::vector<float>& host, std::vector<int64_t> shape) override {
    return UploadRaw(host.data(), DType::kF32, std::move(shape));
  }
  Buffer UploadRaw(const void* host, DType dtype, std::vector<int64_t> shape) override {
    Buffer b = Alloc(dtype, std::move(shape));
    CopyFromHost(host, b.t());
    return b;
  }
  void CopyToHost(const Tensor& src, void* host) override {
    if (src.dtype != DType::kF16) {
      Q38_CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
      Q38_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    std::vector<uint16_t> half(src.numel());
    Q38_CUDA_CHECK(cudaMemcpyAsync(half.data(), src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    Q38_CUDA_CHECK(cudaStreamSynchronize(stream_));
    float* out = static_cast<float*>(host);
    for (size_t i = 0; i < half.size(); ++i) out[i] = Fp16ToFloat(half[i]);
  }
  void CopyFromHost(const void* host, Tensor& dst) override {
    Q38_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    // The host buffer may be reused as soon as this returns.
    Q38_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void Copy(const Tensor& src, Tensor& dst) override {
    CHECK_EQ(src.nbytes(), dst.nbytes());
    Q38_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  void Fill(Tensor& dst, float value) override {
    if (dst.dtype == DType::kF32) {
      cuda::FillFloat(F(dst), value, dst.numel(), stream_);
    } else {
      cuda::FillHalf(H(dst), value, dst.numel(), stream_);
    }
  }
  void FillRandom(Tensor& dst, uint64_t seed, float spread) override {
    const cuda::RandomKind kind = dst.dtype == DType::kF16   ? cuda::RandomKind::kHalf
                                  : dst.dtype == DType::kF32 ? cuda::RandomKind::kFloat
                                  : dst.dtype == DType::kU8  ? cuda::RandomKind::kByte
                                                             : cuda::RandomKind::kScaleByte;
    CHECK(kind != cuda::RandomKind::kScaleByte || dst.dtype == DType::kF8E4M3) << DTypeName(dst.dtype);
    cuda::FillRandom(dst.data, kind, seed, spread, dst.numel(), stream_);
  }
  void WriteRows(const Tensor& src, Tensor& cache, const Tensor& positions) override {
    CHECK(src.dtype == cache.dtype && src.row_size() == cache.row_size());
    cuda::WriteRows(src.data, cache.data, I64(positions), src.dim(0), src.row_size() * DTypeSize(src.dtype), stream_);
  }

  void Linear(const Tensor& x, const Tensor& w, Tensor& y) override {
    CHECK_EQ(x.dim(-1), w.dim(1));
    cuda::Linear(H(x), H(w), H(y), Rows(x), w.dim(1), w.dim(0), stream_);
  }
  void Add(Tensor& x, const Tensor& y) override {
    if (x.dtype == DType::kF32) {  // the residual streams
      cuda::Add(F(x), H(y), x.numel(), stream_);
    } else {
      cuda::Add(H(x), H(y), x.numel(), stream_);
    }
  }
  void SigmoidMul(Tensor& x, const Tensor& gate) override { cuda::SigmoidMul(H(x), H(gate), x.numel(), stream_); }
  void SiluMul(const Tensor& gu, Tensor& y) override { cuda::SiluMul(H(gu), H(y), Rows(y), y.dim(-1), stream_); }

  void RmsNorm(const Tensor& x, const Tensor& w, Tensor& y, int64_t group, bool zero_centred, float eps) override {
    if (x.dtype == DType::kF32) {  // the residual streams
      cuda::RmsNorm(F(x), H(w), H(y), Rows(x), x.dim(-1), group, w.numel(), eps, zero_centred, stream_);
    } else {
      cuda::RmsNorm(H(x), H(w), H(y), Rows(x), x.dim(-1), group, w.numel(), eps, zero_centred, stream_);
    }
  }
  void GatedRmsNorm(const Tensor& o, const Tensor& z, const Tensor& w, Tensor& y, bool sigmoid_gate,
                    float eps) override {
    cuda::GatedRmsNorm(H(o), H(z), H(w), H(y), Rows(o), o.dim(-1), w.numel(), eps, sigmoid_gate, stream_);
  }

  void Rope(Tensor& x, const Tensor& positions, int64_t rotary_dim, double theta) override {
    cuda::Rope(H(x), I64(positions), x.dim(0), x.dim(1), x.dim(2), rotary_dim, theta, stream_);
  }
  void NormRope(Tensor& x, const Tensor& w, const Tensor& positions, int64_t rotary_dim, double theta, float eps,
                Tensor& cache) override {
    CHECK(x.rank() == 3 && w.numel() == x.dim(2)) << "NormRope: x [T, heads, head_dim], w [head_dim]";
    CHECK(cache.data == nullptr || (cache.dtype == x.dtype && cache.row_size() == x.row_size()));
    cuda::NormRope(H(x), H(w), I64(positions), x.dim(0), x.dim(1), x.dim(2), rotary_dim, theta, eps,
                   cache.data != nullptr ? H(cache) : nullptr, stream_);
  }
  // One kernel wherever the three tensors take the same load step (cuda::NormRopeBatchFits).
  void PrepareAttentionInputs(AttentionInputs& in, const Tensor& positions, int64_t rotary_dim, double theta,
                              float eps) override {
    const auto tensor = [&](Tensor& x, const Tensor& w, Tensor* cache) {
      CHECK(x.rank() == 3 && w.numel() == x.dim(2)) << "PrepareAttentionInputs: x [T, heads, head_dim], w [head_dim]";
      return cuda::NormRopeTensor{H(x), H(w), cache != nullptr ? H(*cache) : nullptr, x.dim(1), x.dim(2)};
    };
    const auto copy = [&](const Tensor& src, Tensor& cache) {
      CHECK(src.dtype == cache.dtype && src.row_size() == cache.row_size());
      return cuda::RowCopy{H(src), H(cache), src.row_size()};
    };
    CHECK(in.k_cache.dtype == in.k.dtype && in.k_cache.row_size() == in.k.row_size());
    if (in.v.dtype != DType::kF16 || in.raw.dtype != DType::kF16) {  // the kernel copies halves
      Backend::PrepareAttentionInputs(in, positions, rotary_dim, theta, eps);
      return;
    }
    const cuda::NormRopeBatch batch{{tensor(in.q, in.q_norm, nullptr), tensor(in.k, in.k_norm, &in.k_cache),
                                     tensor(in.iq, in.iq_norm, nullptr)},
                                    {copy(in.v, in.v_cache), copy(in.raw, in.raw_cache)}};
    if (!cuda::NormRopeBatchFits(batch)) {
      Backend::PrepareAttentionInputs(in, positions, rotary_dim, theta, eps);
      return;
    }
    cuda::NormRope(batch, I64(positions), in.q.dim(0), rotary_dim, theta, eps, stream_);
  }
  void CausalConv(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y, int64_t dilation) override {
    CHECK_LE((w.dim(1) - 1) * dilation, cuda::kConvMaxHistory);
    cuda::CausalConv(H(x), H(w), H(state), H(y), Rows(x), x.dim(-1), w.dim(1), dilation, stream_);
  }

  void GdnGates(const Tensor& b, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias, Tensor& beta,
                Tensor& g) override {
    cuda::GdnGates(H(b), H(a), F(a_log), F(dt_bias), F(beta), F(g), Rows(b), b.dim(-1), stream_);
  }
  // One token: one kernel (gdn_cuda.h, GdnMixer); otherwise the four ops.
  void GdnMixer(const Tensor& raw, const Tensor& z, const Tensor& b, const Tensor& a, const GdnMixerWeights& w,
                Tensor& conv_state, Tensor& state, Tensor& y, float eps) override {
    const int64_t Hk = w.key_heads, Hv = state.dim(0), dk = state.dim(1), dv = state.dim(2);
    const int64_t C = 2 * Hk * dk + Hv * dv;
    const bool halves = raw.dtype == DType::kF16 && z.dtype == DType::kF16 && b.dtype == DType::kF16 &&
                        a.dtype == DType::kF16 && y.dtype == DType::kF16 && w.conv.dtype == DType::kF16 &&
                        w.norm.dtype == DType::kF16 && conv_state.dtype == DType::kF16;
    const bool floats = state.dtype == DType::kF32 && w.a_log.dtype == DType::kF32 && w.dt_bias.dtype == DType::kF32;
    const bool fits = halves && floats && Rows(raw) == 1 && dk == w.key_dim && raw.dim(-1) == C &&
                      z.numel() == Hv * dv && y.numel() == Hv * dv && a.numel() == Hv && b.numel() == Hv &&
                      w.conv.dim(0) == C && w.conv.dim(1) == 4 && conv_state.dim(0) == 3 && conv_state.dim(1) == C &&
                      w.norm.numel() == dv && cuda::GdnMixerArrivals(Hk, Hv) <= kArrivals &&
                      cuda::GdnMixerFits(Hk, Hv, dk);
    if (!fits) {
      Backend::GdnMixer(raw, z, b, a, w, conv_state, state, y, eps);
      return;
    }
    Buffer o = Alloc(DType::kF16, {Hv * dv});
    cuda::GdnMixer(H(raw), H(z), H(b), H(a), {H(w.conv), F(w.a_log), F(w.dt_bias), H(w.norm), eps, w.sigmoid_gate},
                   H(conv_state), F(state), H(o.t()), H(y), arrivals_, Hk, Hv, dk, dv, stream_);
  }
  // Calls of 32 tokens or more take the chunked form and calls below it the recurrent one,
  // whatever `chunked` says (it picks the CPU's form).
  void GdnDeltaRule(const Tensor& qkv, const Tensor& beta, const Tensor& g, Tensor& state, Tensor& o,
                    int64_t key_heads, int64_t key_dim, bool /*chunked*/) override {
    const int64_t T = Rows(qkv), Hv = state.dim(0);
    Buffer scratch = Alloc(DType::kF32, {std::max<int64_t>(cuda::GdnDeltaRuleScratchFloats(T, Hv), 1)});
    cuda::GdnDeltaRule(H(qkv), F(beta), F(g), F(state), H(o), F(scratch.t()), T, key_heads, Hv, key_dim,
                       state.dim(2), stream_);
  }

  void IndexerPoolBlocks(const Tensor& raw_keys, const Tensor& knorm_w, Tensor& pooled, const Tensor& positions,
                         int64_t ratio, float eps, int64_t rotary_dim, double theta) override {
    cuda::IndexerPoolBlocks(H(raw_keys), H(knorm_w), H(pooled), I64(positions), positions.numel(), raw_keys.dim(-1),
                            ratio, eps, rotary_dim, theta, stream_);
  }
  // One query of a long sequence: scores and selection in one kernel with grid-wide barriers
  // (IndexerSelectGrid) where the backend is alone on its device; otherwise a score kernel and a
  // block per query. The pooled cache's length decides, since a recorded step keeps its kernels
  // while the sequence grows: attention_bench has the one kernel behind below 8,192 blocks
  // (17.5 µs against 14.0 at 2,048) and ahead from there (45.7 against 100.1 at 65,536).
  void IndexerSelect(const Tensor& iq, const Tensor& pooled, const Tensor& positions, Tensor& sel,
                     int64_t ratio) override {
    constexpr int64_t kGridMinBlocks = 8192;
    const int64_t T = iq.dim(0), max_visible = pooled.dim(0);
    if (T == 1 && sel.dim(1) >= 1 && max_visible >= kGridMinBlocks && grid_.indexer &&
        DeviceTenants::Alone(info_.ordinal) &&
        cuda::IndexerSelectGridFits(iq.dim(1), iq.dim(2), max_visible)) {
      Buffer scratch = Alloc(DType::kI32, {cuda::IndexerSelectGridScratchInts()});
      cuda::IndexerSelectGrid(H(iq), H(pooled), I64(positions), I32(sel), I32(scratch.t()), iq.dim(1), iq.dim(2), ratio,
                              sel.dim(1), max_visible, stream_);
      return;
    }
    Buffer scratch = Alloc(DType::kF32, {T, max_visible});
    cuda::IndexerSelect(H(iq), H(pooled), I64(positions), I32(sel), F(scratch.t()), T, iq.dim(1), iq.dim(2), ratio,
                        sel.dim(1), max_visible, stream_);
  }
  void SelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                         const Tensor& positions, Tensor& o, int64_t ratio) override {
    Attend(q, kcache, vcache, sel, positions, o, ratio, nullptr);
  }
  // The gate joins the merge of the splits (decode), else a SigmoidMul after the kernel.
  void GatedSelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                              const Tensor& positions, const Tensor& gate, Tensor& o, int64_t ratio) override {
    CHECK(gate.numel() == o.numel()) << "GatedSelectedAttention: a gate per output value";
    Attend(q, kcache, vcache, sel, positions, o, ratio, H(gate));
  }

  void RouterTopK(const Tensor& logits, Tensor& idx, Tensor& w) override {
    cuda::RouterTopK(H(logits), I32(idx), H(w), Rows(logits), logits.dim(-1), idx.dim(-1), stream_);
  }
  void RoutedExperts(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& e,
                     Tensor& out) override {
    Experts(h, idx, w, e, out, {});
  }
  // Decode with NVFP4 experts: two kernels (moe_cuda.h, ExpertsAndSharedDecode). Otherwise the
  // shared expert's SiLU·up and GEMV, then the routed experts, whose sum adds the gated shared one.
  void ExpertsAndShared(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& e,
                        const Tensor& shared_gu, const Tensor& shared_down, const Tensor& gate_logit,
                        Tensor& out) override {
    const int64_t T = Rows(h), k = idx.dim(-1), Is = shared_down.dim(1);
    CHECK(shared_gu.dim(-1) == 2 * Is && Rows(shared_gu) == T && shared_down.dim(0) == out.dim(-1) &&
          Rows(gate_logit) == T);
    const auto [gu, dn] = Projections(e, h.dim(-1));
    const cuda::SharedExpert shared{H(shared_gu), H(shared_down), Is, H(gate_logit), gate_logit.dim(-1)};
    if (cuda::ExpertsAndSharedDecodeFits(gu, dn, T, k, shared)) {
      Buffer act = Alloc(DType::kF16, {T * k, e.intermediate});
      cuda::ExpertsAndSharedDecode(H(h), I32(idx), H(w), gu, dn, H(out), H(act.t()), T, k, shared, stream_);
      return;
    }
    Buffer act = Alloc(DType::kF16, {T, Is}), shared_out = Alloc(DType::kF16, {T, out.dim(-1)});
    SiluMul(shared_gu, act.t());
    Linear(act.t(), shared_down, shared_out.t());
    Experts(h, idx, w, e, out, {H(shared_out.t()), H(gate_logit), gate_logit.dim(-1)});
  }
  void AddSigmoidGated(Tensor& out, const Tensor& shared, const Tensor& gate_logit) override {
    cuda::AddSigmoidGated(H(out), H(shared), H(gate_logit), gate_logit.dim(-1), Rows(out), out.dim(-1), stream_);
  }

  void EmbedStreams(const Tensor& table, const Tensor& ids, Tensor& X, int64_t streams) override {
    cuda::EmbedStreams(H(table), I32(ids), F(X), ids.numel(), streams, table.dim(1), stream_);
  }
  void HcGates(const Tensor& di, Tensor& a, Tensor& g, int64_t streams, bool inject) override {
    cuda::HcGates(H(di), H(a), inject ? H(g) : nullptr, Rows(di), a.dim(-1), streams, inject, stream_);
  }
  void HcCombine(const Tensor& m, const Tensor& xn, Tensor& h) override {
    cuda::HcCombine(H(m), H(xn), H(h), Rows(h), m.dim(-1) / h.dim(-1), h.dim(-1), stream_);
  }
  void HcResidual(Tensor& X, const Tensor& g, const Tensor& y) override {
    cuda::HcResidual(F(X), H(g), H(y), Rows(y), g.dim(-1), y.dim(-1), stream_);
  }
  // One token: two kernels (hc_cuda.h, HcPreFused); more tokens, or shapes it does not take: the
  // composition of five.
  void HcPre(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g,
             int64_t streams, float eps) override {
    if (!HcPreFused(X, norm, down_inject, up, h, g, streams, eps, {})) {
      Backend::HcPre(X, norm, down_inject, up, h, g, streams, eps);
    }
  }
  // One token: the same two kernels, which add the residual on their way (HcLastResidual).
  void HcResidualPre(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm, const Tensor& down_inject,
                     const Tensor& up, Tensor& h, Tensor& g, int64_t streams, float eps) override {
    const bool fits = g_last.data != g.data && g_last.numel() == streams && y.numel() == h.numel() &&
                      reinterpret_cast<uintptr_t>(y.data) % 16 == 0;
    if (!fits || !HcPreFused(X, norm, down_inject, up, h, g, streams, eps, {H(g_last), H(y)})) {
      // More tokens: the update inside the norm (HcResidualNorm), then the rest of the composition.
      CHECK(g_last.data != g.data) << "HcResidualPre: the last gates and the new ones share a tensor";
      Buffer xn = Alloc(DType::kF16, {Rows(X), X.dim(-1)});
      HcResidualNorm(X, g_last, y, norm, xn.t(), eps);
      HcPreOfNormed(xn.t(), down_inject, up, h, g, streams);
    }
  }
  void HcResidualNorm(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm, Tensor& xn,
                      float eps) override {
    const int64_t S = g_last.dim(-1), H_ = y.dim(-1);
    if (X.dtype != DType::kF32 || xn.dtype != DType::kF16 || X.dim(-1) != S * H_ ||
        !cuda::HcResidualNormFits(S, H_, norm.numel(), X.data, y.data, norm.data, xn.data)) {
      return Backend::HcResidualNorm(X, g_last, y, norm, xn, eps);
    }
    cuda::HcResidualNorm(F(X), H(g_last), H(y), H(norm), norm.numel(), H(xn), Rows(y), S, H_, eps, stream_);
  }
  void ArgMax(const Tensor& logits, int64_t valid, Tensor& out) override {
    CHECK(Rows(logits) == 1 && valid >= 0 && valid <= logits.dim(-1) && out.numel() == 2);
    Buffer scratch = Alloc(DType::kF32, {2 * cuda::kArgMaxBlocks});
    cuda::ArgMax(H(logits), valid, F(out), F(scratch.t()), stream_);
  }
  void TopLogits(const Tensor& logits, int64_t valid, int64_t k, Tensor& out) override {
    CHECK(Rows(logits) == 1 && valid >= 0 && valid <= logits.dim(-1) && out.numel() == 2 * k + 2);
    Buffer scratch = Alloc(DType::kF32, {cuda::kArgMaxBlocks * (2 * k + 2)});
    cuda::TopLogits(H(logits), valid, k, F(out), F(scratch.t()), stream_);
  }

  void PleLoad(const Tensor& staged, float scale, Tensor& E) override {
    cuda::PleLoad(staged.as<uint8_t>(), staged.dtype, scale, H(E), E.numel(), stream_);
  }
  void PleGate(const Tensor& kn, const Tensor& qn, const Tensor& v, Tensor& G) override {
    cuda::PleGate(H(kn), H(qn), H(v), H(G), Rows(v), kn.dim(-1) / v.dim(-1), v.dim(-1), stream_);
  }

  absl::StatusOr<std::unique_ptr<StepGraph>> Capture(const std::function<absl::Status()>& body) override {
    auto pool = std::make_shared<cuda::DevicePool>();
    // Relaxed: the allocator may still call cudaMalloc while the step is being recorded.
    RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin capture"));
    absl::Status recorded;
    {
      cuda::DeviceAllocator::Scope scope(allocator_, pool);
      recorded = body();
    }
    cudaGraph_t graph = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaStreamEndCapture(stream_, &graph), "end capture"));
    RETURN_IF_ERROR(recorded);
    captured_kernels_ = CountKernels(graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(CudaStatus(e, "graph instantiate"));
    return std::make_unique<CudaGraph>(exec, std::move(pool), stream_);
  }

  int64_t captured_kernels() const override { return captured_kernels_; }

  void BindToThread() override { Q38_CUDA_CHECK(cudaSetDevice(info_.ordinal)); }

  absl::Status Synchronize() override { return CudaStatus(cudaStreamSynchronize(stream_), "synchronize"); }

 private:
  // SelectedAttention, times sigmoid(gate) where a gate is given.
  void Attend(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel, const Tensor& positions,
              Tensor& o, int64_t ratio, const __half* gate) {
    const cuda::SelectedAttentionDims d{q.dim(1), kcache.dim(1), q.dim(2), ratio, sel.dim(1)};
    const int64_t T = q.dim(0);
    Buffer scratch = Alloc(DType::kF32, {std::max<int64_t>(cuda::AttentionScratchFloats(T, d), 1)});
    cuda::SelectedAttention(H(q), H(kcache), H(vcache), I32(sel), I64(positions), H(o), F(scratch.t()), T, d,
                            stream_, gate);
  }

  // The experts' gate/up and down projections as the kernels take them.
  static std::pair<cuda::ExpertProjection, cuda::ExpertProjection> Projections(const ExpertWeights& e, int64_t H_) {
    const int64_t I = e.intermediate;
    cuda::ExpertProjection gu, dn;
    if (e.nvfp4) {
      const Nvfp4ExpertWeights& q = e.q;
      gu = {q.gate_up_codes.t().as<uint8_t>(), q.gate_up_scales.t().as<uint8_t>(), F(q.gate_global.t()),
            F(q.up_global.t()), I, nullptr, 2 * I, H_};
      dn = {q.down_codes.t().as<uint8_t>(), q.down_scales.t().as<uint8_t>(), F(q.down_global.t()),
            F(q.down_global.t()), H_, nullptr, H_, I};
    } else {
      gu.dense = H(e.dense.gate_up.t());
      gu.N = 2 * I;
      gu.K = H_;
      dn.dense = H(e.dense.down.t());
      dn.N = H_;
      dn.K = I;
    }
    return {gu, dn};
  }

  // HcPre or HcResidualPre's two kernels (hc_cuda.h, HcPreFused) where they take the step: one
  // token, FP32 streams. False where they do not, having run nothing.
  bool HcPreFused(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h,
                  Tensor& g, int64_t streams, float eps, cuda::HcLastResidual last) {
    const int64_t S = streams, H_ = h.dim(-1), R = up.dim(1), rows = down_inject.dim(0);
    const bool inject = rows == R + S;
    if (Rows(X) != 1 || X.dtype != DType::kF32 || !(rows == R || inject) || X.dim(-1) != S * H_ ||
        !cuda::HcPreFusedFits(S, H_, R, norm.numel(), X.data, norm.data, down_inject.data, up.data)) {
      return false;
    }
    Buffer parts = Alloc(DType::kF32, {cuda::HcPreScratchFloats(S, R, inject)}), rstd = Alloc(DType::kF32, {S});
    cuda::HcPreFused(F(X), H(norm), norm.numel(), H(down_inject), H(up), H(h), inject ? H(g) : nullptr, F(parts.t()),
                     F(rstd.t()), S, H_, R, inject, eps, stream_, last);
    return true;
  }

  void Experts(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& e, Tensor& out,
               cuda::GatedShared shared) {
    const int64_t T = Rows(h), k = idx.dim(-1), H_ = h.dim(-1), I = e.intermediate;
    const auto [gu, dn] = Projections(e, H_);
    const int64_t E = e.nvfp4 ? e.q.gate_up_codes.t().dim(0) : e.dense.gate_up.t().dim(0);
    Buffer act = Alloc(DType::kF16, {T * k, I}), pair_out = Alloc(DType::kF32, {T * k, H_});
    const bool grouped = T > cuda::kPairwiseMaxTokens;
    Buffer groups = grouped ? Alloc(DType::kI32, {cuda::ExpertGroupsInts(T * k, E)}) : Buffer();
    cuda::RoutedExperts(H(h), I32(idx), H(w), gu, dn, H(out),
                        {H(act.t()), F(pair_out.t()), grouped ? I32(groups.t()) : nullptr}, T, k, E, stream_, shared);
  }

  // Arrival counters of the kernels whose last block finishes a step (GdnMixer), zero between calls.
  static constexpr int64_t kArrivals = 1024;

  CudaDeviceInfo info_;
  cudaStream_t stream_;
  int* arrivals_ = nullptr;
  cuda::DeviceAllocator allocator_;
  std::shared_ptr<StagingPool> staging_ = std::make_shared<StagingPool>();
  int64_t overflow_ = 0;
  int64_t captured_kernels_ = -1;
  GridKernels grid_;
};

}  // namespace

absl::StatusOr<GridKernels> ParseGridKernels(const std::string& spec) {
  if (spec == "all" || spec == "indexer") return GridKernels{};
  if (spec == "none") return GridKernels{false};
  return absl::InvalidArgumentError(
      absl::StrCat("cuda_grid_kernels: \"", spec, "\" is none of all, none, indexer"));
}

std::string GridKernelsName(const GridKernels& g) { return g.indexer ? "all" : "none"; }

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal, const GridKernels& grid) {
  int count = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("GPU ", ordinal, " requested; this process sees ", count));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.uuid = UuidString(prop.uuid);
  char bus[32] = {};
  cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal);
  info.pci_bus_id = bus;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.total_memory = prop.totalGlobalMem;
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  return std::unique_ptr<CudaBackend>(new CudaBackendImpl(std::move(info), stream, grid));
}

}  // namespace q38
