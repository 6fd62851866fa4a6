// The op interface the model is written against (docs/design.md §3). The CPU backend implements it
// plainly in FP32 as the numerical reference; the CUDA backend implements the same ops with
// SM70 kernels. Tensors passed in live in the backend's memory (Alloc/Upload).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "kernels/buffer.h"
#include "kernels/moe/expert_weights.h"
#include "kernels/tensor.h"

namespace q38 {

// A recorded sequence of backend work that can be run again (docs/design.md §5: decode runs as one
// CUDA graph per step). The buffers it was recorded with stay its inputs and outputs.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual absl::Status Replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory. Activations use act_dtype(); Upload converts FP32 host data to the backend's weight
  // format (counting values that format cannot hold in overflow_count()), UploadF32 keeps FP32
  // (scales, gate constants), UploadRaw copies bytes (codes, scales, ids). AllocStaging returns
  // host memory the backend's ops can read directly, for inputs refilled before every step.
  virtual DType act_dtype() const = 0;
  virtual Buffer Alloc(DType dtype, std::vector<int64_t> shape) = 0;
  virtual Buffer AllocStaging(DType dtype, std::vector<int64_t> shape) = 0;
  virtual Buffer Upload(const std::vector<float>& host, std::vector<int64_t> shape) = 0;
  virtual Buffer UploadF32(const std::vector<float>& host, std::vector<int64_t> shape) = 0;
  virtual Buffer UploadRaw(const void* host, DType dtype, std::vector<int64_t> shape) = 0;
  virtual int64_t overflow_count() const = 0;
  virtual void CopyToHost(const Tensor& src, void* host) = 0;  // activations arrive as FP32
  virtual void CopyFromHost(const void* host, Tensor& dst) = 0;
  virtual void Copy(const Tensor& src, Tensor& dst) = 0;
  virtual void Fill(Tensor& dst, float value) = 0;
  // Synthetic weights (common/splitmix64.h): floats uniform in ±spread, U8 uniform bytes, F8_E4M3
  // block-scale bytes; element i depends only on (seed, i), alike on every backend.
  virtual void FillRandom(Tensor& dst, uint64_t seed, float spread) = 0;
  // cache[positions[t]] = src[t] for each row t: cache writes addressed by device-side positions,
  // so a recorded step stays valid at the next position.
  virtual void WriteRows(const Tensor& src, Tensor& cache, const Tensor& positions) = 0;

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
  // Attention's per-head norm and rotation as one op (fused: docs/cuda.md), the composition
  //   RmsNorm(x, w, x, group: head_dim, zero-centred);  Rope(x, positions);  WriteRows(x, cache, positions)
  // on x [T, heads, head_dim]; the last only where cache has data. This default runs the composition.
  virtual void NormRope(Tensor& x, const Tensor& w, const Tensor& positions, int64_t rotary_dim, double theta,
                        float eps, Tensor& cache);
  // An attention layer's inputs made ready for a step as one op (fused: docs/cuda.md), the
  // composition
  //   WriteRows(v, v_cache, positions);  NormRope(q, q_norm, …);  NormRope(k, k_norm, …, k_cache);
  //   NormRope(iq, iq_norm, …);  WriteRows(raw, raw_cache, positions)
  // with q, k [T, heads, head_dim] and iq [T, heads, indexer_head_dim]. This default runs the five.
  struct AttentionInputs {
    Tensor q, q_norm, k, k_norm, k_cache, v, v_cache, iq, iq_norm, raw, raw_cache;
  };
  virtual void PrepareAttentionInputs(AttentionInputs& in, const Tensor& positions, int64_t rotary_dim, double theta,
                                      float eps);
  // x [T, C], w [C, K], state [(K-1)·dilation, C], y [T, C].
  virtual void CausalConv(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y, int64_t dilation) = 0;

  // Gated DeltaNet: b, a [T, Hv] → beta, g; qkv [T, 2·Hk·dk + Hv·dv] from the conv;
  // state F32 [Hv, dk, dv]; o [T, Hv·dv]. chunked selects the prefill form.
  virtual void GdnGates(const Tensor& b, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias,
                        Tensor& beta, Tensor& g) = 0;
  virtual void GdnDeltaRule(const Tensor& qkv, const Tensor& beta, const Tensor& g, Tensor& state,
                            Tensor& o, int64_t key_heads, int64_t key_dim, bool chunked) = 0;
  // A GDN layer's mixer from its projections to its gated norm as one op (fused: docs/cuda.md),
  // the composition
  //   xc = CausalConv(raw, w.conv, conv_state, dilation 1);  beta, g = GdnGates(b, a, w.a_log, w.dt_bias);
  //   o = GdnDeltaRule(xc, beta, g, state, w.key_heads, w.key_dim, chunked: T > 1);
  //   y = GatedRmsNorm(o, z, w.norm, w.sigmoid_gate, eps)
  // with raw [T, 2·Hk·dk + Hv·dv], z and y [T, Hv·dv], b and a [T, Hv]. This default runs the four.
  struct GdnMixerWeights {
    Tensor conv, a_log, dt_bias, norm;
    int64_t key_heads = 0, key_dim = 0;
    bool sigmoid_gate = false;
  };
  virtual void GdnMixer(const Tensor& raw, const Tensor& z, const Tensor& b, const Tensor& a, const GdnMixerWeights& w,
                        Tensor& conv_state, Tensor& state, Tensor& y, float eps);

  // QSA (kernels/attention).
  // Pools every block that a token at one of `positions` completes.
  virtual void IndexerPoolBlocks(const Tensor& raw_keys, const Tensor& knorm_w, Tensor& pooled,
                                 const Tensor& positions, int64_t ratio, float eps,
                                 int64_t rotary_dim, double theta) = 0;
  virtual void IndexerSelect(const Tensor& iq, const Tensor& pooled, const Tensor& positions,
                             Tensor& sel, int64_t ratio) = 0;
  virtual void SelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache,
                                 const Tensor& sel, const Tensor& positions, Tensor& o, int64_t ratio) = 0;
  // Attention's output gated (fused: docs/cuda.md), the composition
  //   SelectedAttention(q, kcache, vcache, sel, positions, o, ratio);  SigmoidMul(o as [T, Hq·dh], gate)
  // with gate [T, Hq·dh]. This default runs the two.
  virtual void GatedSelectedAttention(const Tensor& q, const Tensor& kcache, const Tensor& vcache, const Tensor& sel,
                                      const Tensor& positions, const Tensor& gate, Tensor& o, int64_t ratio);

  // MoE (kernels/moe).
  virtual void RouterTopK(const Tensor& logits, Tensor& idx, Tensor& w) = 0;
  virtual void RoutedExperts(const Tensor& h, const Tensor& idx, const Tensor& w,
                             const ExpertWeights& experts, Tensor& out) = 0;
  virtual void AddSigmoidGated(Tensor& out, const Tensor& shared, const Tensor& gate_logit) = 0;
  // The MoE block's output after the router as one op (fused: docs/cuda.md), the composition
  //   act = SiluMul(shared_gu);  shared = act·shared_downᵀ;
  //   RoutedExperts(h, idx, w, experts, out);  AddSigmoidGated(out, shared, gate_logit)
  // with the shared expert's gate/up output shared_gu [T, 2·Is] and its down weight [H, Is]. This
  // default runs the four.
  virtual void ExpertsAndShared(const Tensor& h, const Tensor& idx, const Tensor& w, const ExpertWeights& experts,
                                const Tensor& shared_gu, const Tensor& shared_down, const Tensor& gate_logit,
                                Tensor& out);

  // Hyper-connections (kernels/hc).
  virtual void EmbedStreams(const Tensor& table, const Tensor& ids, Tensor& X, int64_t streams) = 0;
  virtual void HcGates(const Tensor& di, Tensor& a, Tensor& g, int64_t streams, bool inject) = 0;
  virtual void HcCombine(const Tensor& m, const Tensor& xn, Tensor& h) = 0;
  virtual void HcResidual(Tensor& X, const Tensor& g, const Tensor& y) = 0;
  // A hyper-connection module's pre step as one op (fused: docs/cuda.md), the composition
  //   xn = RmsNorm(X, norm, groups of H, zero-centred);  di = xn·down_injectᵀ;
  //   a, g = HcGates(di, S, inject);  m = a·upᵀ;  h = HcCombine(m, xn)
  // with FP32 X [T, S·H], down_inject [R + S, S·H] (inject: gains g [T, S] written) or [R, S·H]
  // (the final mixer: g untouched), up [S·H, R], h [T, H]. Intermediates in act_dtype(), as the
  // composition rounds them. This default runs the composition through the backend's own ops.
  virtual void HcPre(const Tensor& X, const Tensor& norm, const Tensor& down_inject, const Tensor& up, Tensor& h,
                     Tensor& g, int64_t streams, float eps);
  // The last sub-block's residual update and the next module's pre step as one op (fused:
  // docs/cuda.md), the composition
  //   HcResidual(X, g_last, y);  HcPre(X, norm, down_inject, up, h, g, streams, eps)
  // g_last [T, S] and g must be distinct tensors (the step writes g while it reads g_last).
  virtual void HcResidualPre(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm,
                             const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g, int64_t streams,
                             float eps);
  // The residual update and the norm that opens the next pre step as one op (fused: docs/cuda.md),
  // the composition
  //   HcResidual(X, g_last, y);  xn = RmsNorm(X, norm, groups of H, zero-centred)
  // with xn [T, S·H] in act_dtype(). This default runs the two.
  virtual void HcResidualNorm(Tensor& X, const Tensor& g_last, const Tensor& y, const Tensor& norm, Tensor& xn,
                              float eps);

  // Greedy decoding without the logits leaving the backend (kernels/logits): of logits [1, V]
  // (one row), the largest of the first `valid` values (0 ≤ valid ≤ V) and its index, as F32
  // out [2] = (value, index); V < 2^24, so the index is exact. Values compare as FP32, a NaN never
  // wins and ties go to the lowest index (worker/sampling/sampler.h, step 1); with no value above
  // −inf, out = (−inf, −1).
  virtual void ArgMax(const Tensor& logits, int64_t valid, Tensor& out) = 0;
  // Log probabilities without the logits leaving the backend: of logits [1, V], F32 out [2k + 2] =
  // the k largest of the first `valid` values, their indices, the largest value and Σ exp(x − max)
  // (kernels/logits/logits.h, cpu::TopLogits; 1 ≤ k ≤ 20).
  virtual void TopLogits(const Tensor& logits, int64_t valid, int64_t k, Tensor& out) = 0;

  // PLE (kernels/ple): staged [T, heads·row_width] holds the gathered table rows as stored
  // (kernels/ple/ple.h PleStageRows, into AllocStaging memory); E = staged · scale.
  virtual void PleLoad(const Tensor& staged, float scale, Tensor& E) = 0;
  virtual void PleGate(const Tensor& kn, const Tensor& qn, const Tensor& v, Tensor& G) = 0;

  // Records `body` without running it; Replay runs it. The CPU backend replays by calling body.
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> Capture(const std::function<absl::Status()>& body) = 0;

  // Kernels in the step last recorded by Capture, where the backend launches kernels (−1 elsewhere):
  // a decode step's launch count.
  virtual int64_t captured_kernels() const { return -1; }

  // Makes this backend's device current for the calling thread. CUDA picks the device per thread,
  // and a worker's requests arrive on RPC threads the backend was not created on.
  virtual void BindToThread() {}

  // Waits for queued work; reports a device fault.
  virtual absl::Status Synchronize() = 0;

 protected:
  // HcPre's composition after its norm: di, the gates, m and the combine from xn [T, S·H].
  void HcPreOfNormed(const Tensor& xn, const Tensor& down_inject, const Tensor& up, Tensor& h, Tensor& g,
                     int64_t streams);
};

// The CPU backend's arithmetic. kExact runs every op as its reference in the op's folder (double
// accumulation: the numerical ground truth of the parity, precision and kernel tests); kFast runs
// the products in FP32 SIMD lanes and decodes NVFP4 experts by tile (linear_fast_cpu.cc,
// moe_fast_cpu.cc), within a few FP32 roundings of kExact, for servers and benchmarks.
// With kFast, `threads` > 1 splits the large products over that many threads (kernels/cpu_pool.h),
// for a rank that has cores to itself; the result does not depend on the count.
enum class CpuMath { kExact, kFast };
std::unique_ptr<Backend> MakeCpuBackend(CpuMath math = CpuMath::kExact, int threads = 1);
// Threads for each of `ranks` CPU ranks on this host: its cores shared out, at least one, at most 8.
int CpuThreadsPerRank(int ranks);
// "exact" | "fast"
absl::StatusOr<CpuMath> ParseCpuMath(const std::string& name);

}  // namespace q38
