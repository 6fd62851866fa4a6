// The qwen4_exp forward pass (docs/model.md §3), written once against the op interface. One Model is
// one rank's share of the network; with a Communicator it runs tensor-parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "kernels/backend.h"
#include "kernels/logits/logits.h"
#include "worker/comm/communicator.h"
#include "worker/model/weights.h"

namespace q38 {

// What a forward step reads besides the weights and caches: token ids and positions on the
// backend, and per PLE layer the table rows it reads, staged from host memory.
struct StepInputs {
  Buffer ids;                    // I32 [T]
  Buffer positions;              // I64 [T]
  std::vector<Buffer> ple_rows;  // per layer (empty for non-PLE layers): [T, heads·row_width], table dtype
};

struct SequenceState;

// The decode step recorded once per sequence state and replayed for every later token.
struct DecodeGraph {
  const SequenceState* owner = nullptr;  // the state it was recorded against
  StepInputs inputs;
  Buffer logits;
  std::unique_ptr<StepGraph> graph;
};

// The caches of one sequence on one rank (docs/model.md §12): KV and indexer keys of the attention
// layers, conv and recurrent states of the GDN layers, the PLE's n-gram history and conv state.
struct SequenceState {
  struct Gdn {
    Buffer conv;       // [K-1, channels]
    Buffer recurrent;  // F32 [Hv, dk, dv]
  };
  struct Attention {
    Buffer k, v;      // [capacity, Hkv, dh]
    Buffer raw_keys;  // [capacity, di]: un-normalized, un-rotated indexer keys
    Buffer pooled;    // [capacity / ratio, di]: normalized, rotated block keys
  };
  std::vector<Gdn> gdn;              // indexed by layer; empty for attention layers
  std::vector<Attention> attention;  // indexed by layer; empty for GDN layers
  Buffer ple_conv;                   // [(K-1)·N, S·H]
  std::vector<int64_t> ple_history;  // the last N-1 tokens, most recent first
  int64_t length = 0;                // tokens consumed
  int64_t capacity = 0;              // the most tokens the caches hold
  std::shared_ptr<DecodeGraph> decode;  // with ModelOptions::decode_graph, after the first decode step
};

// One MoE layer's routing of one step, as host copies (ModelOptions::routing).
struct Routing {
  int rank = 0, layer = 0;
  int64_t first_position = 0;   // the step's first token's position
  int64_t tokens = 0, experts = 0, k = 0;
  std::vector<float> logits;    // [tokens, experts], the router's
  std::vector<int32_t> chosen;  // [tokens, k]
  std::vector<float> weights;   // [tokens, k]
};

// One attention layer's choice of indexer blocks for one step, as a host copy
// (ModelOptions::selection).
struct Selection {
  int rank = 0, layer = 0;
  int64_t first_position = 0;  // the step's first token's position
  int64_t tokens = 0, slots = 0;
  std::vector<int32_t> blocks;  // [tokens, slots]: block ids ascending, −1 after the last
};

struct ModelOptions {
  // Decode steps (one token) replay a recorded graph instead of issuing every op.
  bool decode_graph = false;
  // Diagnostics: see each MoE layer's routing before its experts run, and each attention layer's
  // block selection before attention reads it, and may change them; the layer then uses what
  // they leave. Precision studies use them to find the decisions rounding can flip
  // (tools/precision/decision_record.h). They copy through the host, so steps run eagerly.
  std::function<void(Routing&)> routing;
  std::function<void(Selection&)> selection;
};

class Model {
 public:
  Model(const ModelConfig& config, ModelWeights weights, Backend& backend, Communicator& comm,
        ModelOptions options = {});

  SequenceState NewSequence(int64_t capacity) const;
  void Reset(SequenceState& state) const;

  // Runs tokens at positions state.length.. through the network, extending the caches. Returns
  // this rank's logits [T, V/world] for the last `keep` tokens (all when keep ≥ T). T > 1 uses the
  // chunked (prefill) forms of the stateful ops. With decode_graph, a one-token step returns the
  // graph's logits buffer, overwritten by the next step. A multi-token step calls `between_blocks`
  // after each mixer and each MoE block on every rank; a non-OK status ends the step there with that status (the
  // caller decides alike on every rank, e.g. through a collective, and resets the sequence).
  absl::StatusOr<Buffer> Forward(const std::vector<int32_t>& ids, SequenceState& state, int64_t keep = 1,
                                 const std::function<absl::Status()>& between_blocks = nullptr);

  // Full-vocabulary FP32 logits on the host from rank-local logits (an all-gather over ranks).
  absl::StatusOr<std::vector<float>> GatherLogits(const Buffer& local);
  // The greedy token of the last row of rank-local logits without the logits leaving the backend:
  // each rank's (largest, id) of its ids below valid_vocab (Backend::ArgMax), all-gathered, the
  // largest taken, ties to the lowest id. The same token as SampleToken at temperature 0 over
  // GatherLogits' row (worker/sampling/sampler.h, step 1), for 8 bytes a rank instead of V floats.
  // A collective: every rank calls it.
  absl::StatusOr<int32_t> GreedyToken(const Buffer& local, int64_t valid_vocab);
  // Log probabilities the same way: the k most likely of the ids below valid_vocab (by logit, ties to
  // the lowest id; top[0] is GreedyToken's token) and the log-sum-exp over all of them, from each
  // rank's Backend::TopLogits, 2k + 2 floats a rank. A collective: every rank calls it.
  absl::StatusOr<cpu::LogitsSummary> SummarizeLogits(const Buffer& local, int64_t valid_vocab, int64_t k);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() { return backend_; }
  Communicator& comm() { return comm_; }

 private:
  Buffer Act(std::vector<int64_t> shape) { return backend_.Alloc(backend_.act_dtype(), std::move(shape)); }
  StepInputs AllocInputs(int64_t T);
  // Every rank's `width` floats from `reduce` over its part of the last row of `local` below
  // valid_vocab (clamped as SampleToken clamps it), gathered to the host in rank order.
  absl::StatusOr<std::vector<float>> GatherRankReductions(
      const Buffer& local, int64_t valid_vocab, int64_t width,
      const std::function<void(const Tensor& row, int64_t valid, Tensor& out)>& reduce);
  // Fills inputs for ids at positions state.length.. and advances the n-gram history.
  void StageInputs(const std::vector<int32_t>& ids, SequenceState& state, StepInputs& in);
  // Everything a step does on the backend: reads only `in`, the weights and the caches, so that
  // it can be recorded once and replayed at any position.
  absl::StatusOr<Buffer> Step(int64_t T, const StepInputs& in, SequenceState& state, int64_t keep,
                              const std::function<absl::Status()>& between_blocks = nullptr);
  // A sub-block's output y [T, H] and its gates g [T, S]: the residual update X += g·y that the
  // next pre step makes (Backend::HcResidualPre), so that it costs no pass of its own.
  struct PendingResidual {
    Buffer* g = nullptr;
    Buffer y;
  };
  // Runs a hyper-connection module's pre step (Backend::HcPre), first adding `last` to X where it
  // holds one (X may be the last rows of the step's streams; `last` then covers all of them):
  // h [T, H] and, with inject, gains g [T, S], which must not be last's.
  void HyperConnection(const HcWeights& w, Tensor& X, Buffer& h, Buffer* g, PendingResidual& last);
  // Adds `last` to X now (before an op that reads X other than a pre step).
  void AddResidual(Tensor& X, PendingResidual& last);
  // Every part of a stacked projection of h, each [T, rows]. A one-token step runs one GEMV over
  // the stack and takes each part as a view of its output; more tokens run one product per part,
  // since a part of a T-row output would not be contiguous.
  std::vector<Buffer> Project(const Tensor& h, const StackedProjection& w);
  Buffer GatedDeltaNet(const GdnWeights& w, const Tensor& h, SequenceState::Gdn& s);
  // layer and position (the step's first token's) name the decisions ModelOptions' hooks see.
  Buffer Attention(const AttentionWeights& w, const Tensor& h, const Tensor& positions, SequenceState::Attention& s,
                   int layer, int64_t position);
  Buffer Moe(const MoeWeights& w, const Tensor& h, int layer, int64_t position);
  void Ple(const PleWeights& w, Tensor& X, const Tensor& rows, SequenceState& s);
  absl::Status AllReduce(Buffer& partial);
  // F32 or F16 tensor t from host floats (CopyFromHost copies bytes as they are).
  void CopyFloatsFromHost(const std::vector<float>& host, Tensor& t);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  Communicator& comm_;
  ModelOptions options_;
  float eps_;
};

}  // namespace q38
