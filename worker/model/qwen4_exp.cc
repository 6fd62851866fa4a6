#include "worker/model/qwen4_exp.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/ple/ple.h"
#include "kernels/ple/ple_hash.h"

namespace q38 {

Model::Model(const ModelConfig& config, ModelWeights weights, Backend& backend, Communicator& comm,
             ModelOptions options)
    : config_(config), weights_(std::move(weights)), backend_(backend), comm_(comm), options_(options),
      eps_(static_cast<float>(config.rms_norm_eps)) {}

SequenceState Model::NewSequence(int64_t capacity) const {
  const ModelConfig& c = config_;
  Backend& b = backend_;
  const DType act = b.act_dtype();
  SequenceState s;
  s.capacity = capacity;
  s.gdn.resize(c.num_layers);
  s.attention.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = weights_.layers[i];
    if (c.is_attention(i)) {
      const int64_t blocks = capacity / c.indexer_compress_ratio + 1;
      s.attention[i].k = b.Alloc(act, {capacity, l.attn.kv_heads, c.head_dim});
      s.attention[i].v = b.Alloc(act, {capacity, l.attn.kv_heads, c.head_dim});
      s.attention[i].raw_keys = b.Alloc(act, {capacity, c.indexer_head_dim});
      s.attention[i].pooled = b.Alloc(act, {blocks, c.indexer_head_dim});
    } else {
      const int64_t hv = l.gdn.a_log.t().numel();
      s.gdn[i].conv = b.Alloc(act, {c.conv_kernel - 1, l.gdn.conv.t().dim(0)});
      s.gdn[i].recurrent = b.Alloc(DType::kF32, {hv, c.gdn_key_dim, c.gdn_value_dim});
    }
  }
  s.ple_conv = b.Alloc(act, {int64_t{c.ple_conv_kernel - 1} * c.ngram_size, c.hc_width()});
  Reset(s);
  return s;
}

void Model::Reset(SequenceState& s) const {
  for (auto& g : s.gdn) {
    if (g.conv) backend_.Fill(g.conv.t(), 0.0f);
    if (g.recurrent) backend_.Fill(g.recurrent.t(), 0.0f);
  }
  backend_.Fill(s.ple_conv.t(), 0.0f);
  // The n-gram history before the first token is EOS (docs/model.md §6.2).
  s.ple_history.assign(config_.ngram_size - 1, config_.ple_eos());
  s.length = 0;
}

void Model::CopyFloatsFromHost(const std::vector<float>& host, Tensor& t) {
  if (t.dtype != DType::kF16) {
    backend_.CopyFromHost(host.data(), t);
    return;
  }
  std::vector<uint16_t> half(host.size());
  for (size_t i = 0; i < host.size(); ++i) half[i] = FloatToFp16(host[i]);
  backend_.CopyFromHost(half.data(), t);
}

absl::Status Model::AllReduce(Buffer& partial) {
  if (comm_.size() == 1) return absl::OkStatus();
  return comm_.AllReduceSum(partial.t());
}

void Model::HyperConnection(const HcWeights& w, Tensor& X, Buffer& h, Buffer* g, PendingResidual& last) {
  // One op (Backend::HcResidualPre or HcPre): the CUDA backend runs a one-token module as two kernels.
  Tensor none;
  Tensor& gates = g != nullptr ? g->t() : none;
  if (last.g == nullptr) {
    backend_.HcPre(X, w.norm.t(), w.down_inject.t(), w.up.t(), h.t(), gates, config_.hc_count, eps_);
    return;
  }
  const int64_t T = X.dim(0), from = last.y.t().dim(0) - T;
  backend_.HcResidualPre(X, last.g->t().Rows(from, T), last.y.t().Rows(from, T), w.norm.t(), w.down_inject.t(),
                         w.up.t(), h.t(), gates, config_.hc_count, eps_);
  last = {};
}

void Model::AddResidual(Tensor& X, PendingResidual& last) {
  if (last.g == nullptr) return;
  backend_.HcResidual(X, last.g->t(), last.y.t());
  last = {};
}

std::vector<Buffer> Model::Project(const Tensor& h, const StackedProjection& w) {
  const int64_t T = h.dim(0);
  std::vector<Buffer> parts;
  int64_t at = 0;
  if (T == 1) {
    const int64_t N = w.weight.t().dim(0);
    Buffer all = Act({1, N});
    backend_.Linear(h, w.weight.t(), all.t());
    for (int64_t n : w.rows) {
      parts.push_back(all.View(all.t().Reshaped({N}).Rows(at, n).Reshaped({1, n})));
      at += n;
    }
    return parts;
  }
  for (int64_t n : w.rows) {
    parts.push_back(Act({T, n}));
    backend_.Linear(h, w.weight.t().Rows(at, n), parts.back().t());
    at += n;
  }
  return parts;
}

Buffer Model::GatedDeltaNet(const GdnWeights& w, const Tensor& h, SequenceState::Gdn& s) {
  const int64_t T = h.dim(0);
  std::vector<Buffer> in = Project(h, w.in);
  const Buffer &qkv = in[0], &z = in[1], &b = in[2], &a = in[3];
  Buffer y = Act({T, z.t().dim(1)});
  backend_.GdnMixer(qkv.t(), z.t(), b.t(), a.t(),
                    {w.conv.t(), w.a_log.t(), w.dt_bias.t(), w.norm.t(), w.key_heads, config_.gdn_key_dim,
                     config_.gdn_output_gate_sigmoid},
                    s.conv.t(), s.recurrent.t(), y.t(), eps_);
  Buffer out = Act({T, config_.hidden_size});
  backend_.Linear(y.t(), w.out.t(), out.t());
  return out;
}

Buffer Model::Attention(const AttentionWeights& w, const Tensor& h, const Tensor& positions,
                        SequenceState::Attention& s, int layer, int64_t position) {
  const ModelConfig& c = config_;
  const int64_t T = h.dim(0), dh = c.head_dim, Hq = w.q_heads, Hkv = w.kv_heads;
  const int64_t Hi = c.indexer_heads, di = c.indexer_head_dim, ratio = c.indexer_compress_ratio;
  std::vector<Buffer> in = Project(h, w.in);
  Buffer &q = in[0], &gate = in[1], &k = in[2], &v = in[3], &iq = in[4], &raw = in[5];
  q.t() = q.t().Reshaped({T, Hq, dh});
  k.t() = k.t().Reshaped({T, Hkv, dh});
  v.t() = v.t().Reshaped({T, Hkv, dh});
  iq.t() = iq.t().Reshaped({T, Hi, di});
  // The per-head norms and rotations, the key and value cache rows, and the indexer's query and
  // raw key (cached); then pool the blocks this chunk completes and select per query.
  Backend::AttentionInputs ready{q.t(), w.q_norm.t(), k.t(),  w.k_norm.t(),         s.k.t(),
                                 v.t(), s.v.t(),      iq.t(), w.index_q_norm.t(), raw.t(), s.raw_keys.t()};
  backend_.PrepareAttentionInputs(ready, positions, c.rotary_dim, c.rope_theta, eps_);
  backend_.IndexerPoolBlocks(s.raw_keys.t(), w.index_k_norm.t(), s.pooled.t(), positions, ratio, eps_, c.rotary_dim,
                             c.rope_theta);
  Buffer sel = backend_.Alloc(DType::kI32, {T, c.indexer_budget / ratio});
  backend_.IndexerSelect(iq.t(), s.pooled.t(), positions, sel.t(), ratio);
  if (options_.selection) {
    Selection chosen{comm_.rank(), layer, position, T, sel.t().dim(1), std::vector<int32_t>(sel.t().numel())};
    backend_.CopyToHost(sel.t(), chosen.blocks.data());
    const std::vector<int32_t> selected = chosen.blocks;
    options_.selection(chosen);
    if (chosen.blocks != selected) backend_.CopyFromHost(chosen.blocks.data(), sel.t());
  }

  Buffer o = Act({T, Hq, dh});
  backend_.GatedSelectedAttention(q.t(), s.k.t(), s.v.t(), sel.t(), positions, gate.t(), o.t(), ratio);
  Tensor o_flat = o.t().Reshaped({T, Hq * dh});
  Buffer out = Act({T, c.hidden_size});
  backend_.Linear(o_flat, w.o.t(), out.t());
  return out;
}

Buffer Model::Moe(const MoeWeights& w, const Tensor& h, int layer, int64_t position) {
  const ModelConfig& c = config_;
  const int64_t T = h.dim(0), k = c.experts_per_token, E = c.num_experts;
  std::vector<Buffer> in = Project(h, w.in);
  const Buffer &logits = in[0], &gu = in[1], &sg = in[2];
  Buffer idx = backend_.Alloc(DType::kI32, {T, k}), weights = Act({T, k});
  backend_.RouterTopK(logits.t(), idx.t(), weights.t());
  if (options_.routing) {
    Routing r{comm_.rank(), layer, position, T, E, k, std::vector<float>(T * E), std::vector<int32_t>(T * k),
              std::vector<float>(T * k)};
    backend_.CopyToHost(logits.t(), r.logits.data());
    backend_.CopyToHost(idx.t(), r.chosen.data());
    backend_.CopyToHost(weights.t(), r.weights.data());
    const std::vector<int32_t> chosen = r.chosen;
    const std::vector<float> given = r.weights;
    options_.routing(r);
    // Written back only where changed, so that a hook that only looks leaves the run as it was.
    if (r.chosen != chosen || r.weights != given) {
      backend_.CopyFromHost(r.chosen.data(), idx.t());
      CopyFloatsFromHost(r.weights, weights.t());
    }
  }
  Buffer out = Act({T, c.hidden_size});
  backend_.ExpertsAndShared(h, idx.t(), weights.t(), w.experts, gu.t(), w.shared_down.t(), sg.t(), out.t());
  return out;
}

void Model::Ple(const PleWeights& w, Tensor& X, const Tensor& rows, SequenceState& s) {
  const ModelConfig& c = config_;
  const int64_t T = X.dim(0), S = c.hc_count, H = c.hidden_size;
  Buffer e = Act({T, c.ple_embed_dim});
  backend_.PleLoad(rows, w.table.scale, e.t());
  Buffer kp = Act({T, S * H}), v = Act({T, H}), qn = Act({T, S * H});
  backend_.Linear(e.t(), w.key.t(), kp.t());
  backend_.RmsNorm(kp.t(), w.norm_key.t(), kp.t(), H, true, eps_);
  backend_.Linear(e.t(), w.value.t(), v.t());
  backend_.RmsNorm(X, w.norm_query.t(), qn.t(), H, true, eps_);
  Buffer g = Act({T, S * H});
  backend_.PleGate(kp.t(), qn.t(), v.t(), g.t());
  Buffer nc = Act({T, S * H}), conv = Act({T, S * H});
  backend_.RmsNorm(g.t(), w.norm_conv.t(), nc.t(), H, true, eps_);
  backend_.CausalConv(nc.t(), w.conv.t(), s.ple_conv.t(), conv.t(), c.ngram_size);
  backend_.Add(X, g.t());
  backend_.Add(X, conv.t());
}

StepInputs Model::AllocInputs(int64_t T) {
  StepInputs in;
  in.ids = backend_.Alloc(DType::kI32, {T});
  in.positions = backend_.Alloc(DType::kI64, {T});
  in.ple_rows.resize(config_.num_layers);
  for (int i = 0; i < config_.num_layers; ++i) {
    if (const auto& ple = weights_.layers[i].ple) {
      in.ple_rows[i] = backend_.AllocStaging(ple->table.dtype, {T, ple->hash.heads() * ple->table.row_width});
    }
  }
  return in;
}

void Model::StageInputs(const std::vector<int32_t>& ids, SequenceState& state, StepInputs& in) {
  const int64_t T = static_cast<int64_t>(ids.size());
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = state.length + t;
  backend_.CopyFromHost(ids.data(), in.ids.t());
  backend_.CopyFromHost(pos.data(), in.positions.t());
  // Every PLE layer reads the n-gram rows that follow the same history.
  std::vector<int64_t> history;
  for (int i = 0; i < config_.num_layers; ++i) {
    const auto& ple = weights_.layers[i].ple;
    if (!ple) continue;
    history = state.ple_history;
    std::vector<int64_t> rows(T * ple->hash.heads());
    NgramRows(ple->hash, ids.data(), T, config_.ple_eos(), history, rows.data());
    PleStageRows(ple->table, rows.data(), static_cast<int64_t>(rows.size()), in.ple_rows[i].t().as<uint8_t>());
  }
  if (!history.empty()) state.ple_history = history;
}

absl::StatusOr<Buffer> Model::Step(int64_t T, const StepInputs& in, SequenceState& state, int64_t keep,
                                   const std::function<absl::Status()>& between_blocks) {
  const ModelConfig& c = config_;
  const int64_t S = c.hc_count, H = c.hidden_size;
  // The residual streams stay FP32 on every backend: each layer updates them twice, and an FP16
  // stream would round away part of every update (docs/model.md §5).
  Buffer X = backend_.Alloc(DType::kF32, {T, S * H});
  backend_.EmbedStreams(weights_.embed.t(), in.ids.t(), X.t(), S);
  // Two sets of gates in turn: a pre step writes one while it adds the residual of the other.
  Buffer h = Act({T, H}), gates[2] = {Act({T, S}), Act({T, S})};
  PendingResidual last;
  int turn = 0;
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = weights_.layers[i];
    if (l.ple) {
      AddResidual(X.t(), last);
      Ple(*l.ple, X.t(), in.ple_rows[i].t(), state);
    }
    Buffer* g = &gates[turn ^= 1];
    HyperConnection(l.attn_hc, X.t(), h, g, last);
    Buffer y = c.is_attention(i) ? Attention(l.attn, h.t(), in.positions.t(), state.attention[i], i, state.length)
                                 : GatedDeltaNet(l.gdn, h.t(), state.gdn[i]);
    RETURN_IF_ERROR(AllReduce(y));
    last = {g, std::move(y)};
    if (between_blocks) RETURN_IF_ERROR(between_blocks());
    g = &gates[turn ^= 1];
    HyperConnection(l.mlp_hc, X.t(), h, g, last);
    Buffer m = Moe(l.moe, h.t(), i, state.length);
    RETURN_IF_ERROR(AllReduce(m));
    last = {g, std::move(m)};
    if (between_blocks) RETURN_IF_ERROR(between_blocks());
  }
  Tensor last_rows = X.t().Rows(T - keep, keep);
  Buffer hf = Act({keep, H});
  HyperConnection(weights_.mixer, last_rows, hf, nullptr, last);
  Buffer logits = Act({keep, weights_.lm_head.t().dim(0)});
  backend_.Linear(hf.t(), weights_.lm_head.t(), logits.t());
  return logits;
}

absl::StatusOr<Buffer> Model::Forward(const std::vector<int32_t>& ids, SequenceState& state, int64_t keep,
                                      const std::function<absl::Status()>& between_blocks) {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) return absl::InvalidArgumentError("forward: no tokens");
  if (state.length + T > state.capacity) {
    return absl::OutOfRangeError(absl::StrCat("forward: ", state.length + T, " tokens exceed the cache capacity of ",
                                              state.capacity));
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("forward: token id ", id, " outside the vocabulary"));
  }
  if (options_.decode_graph && (options_.routing || options_.selection)) {
    return absl::FailedPreconditionError(
        "forward: routing and block selection are observed through the host, which a decode graph cannot");
  }
  keep = std::min(keep, T);
  if (!(options_.decode_graph && T == 1)) {
    StepInputs in = AllocInputs(T);
    StageInputs(ids, state, in);
    ASSIGN_OR_RETURN(Buffer logits, Step(T, in, state, keep, T > 1 ? between_blocks : nullptr));
    state.length += T;
    return logits;
  }
  if (state.decode == nullptr || state.decode->owner != &state) {
    auto d = std::make_shared<DecodeGraph>();
    d->owner = &state;
    d->inputs = AllocInputs(1);
    DecodeGraph* raw = d.get();
    ASSIGN_OR_RETURN(d->graph, backend_.Capture([this, raw, &state]() -> absl::Status {
      ASSIGN_OR_RETURN(raw->logits, Step(1, raw->inputs, state, 1));
      return absl::OkStatus();
    }));
    state.decode = std::move(d);
  }
  StageInputs(ids, state, state.decode->inputs);
  RETURN_IF_ERROR(state.decode->graph->Replay());
  state.length += 1;
  return state.decode->logits;
}

absl::StatusOr<std::vector<float>> Model::GatherRankReductions(
    const Buffer& local, int64_t valid_vocab, int64_t width,
    const std::function<void(const Tensor& row, int64_t valid, Tensor& out)>& reduce) {
  const int64_t T = local.t().dim(0), Vl = local.t().dim(1), world = comm_.size(), rank = comm_.rank();
  // As SampleToken: ids from n = valid_vocab clamped to [1, V] on are never returned.
  const int64_t n = std::clamp<int64_t>(valid_vocab, 1, world * Vl);
  const int64_t valid = std::clamp<int64_t>(n - rank * Vl, 0, Vl);
  Buffer mine = backend_.Alloc(DType::kF32, {width});
  reduce(local.t().Rows(T - 1, 1), valid, mine.t());
  std::vector<float> all(width * world);
  if (world == 1) {
    backend_.CopyToHost(mine.t(), all.data());
  } else {
    Buffer gathered = backend_.Alloc(DType::kF32, {world, width});
    RETURN_IF_ERROR(comm_.AllGather(mine.t(), gathered.t()));
    backend_.CopyToHost(gathered.t(), all.data());
  }
  return all;
}

absl::StatusOr<int32_t> Model::GreedyToken(const Buffer& local, int64_t valid_vocab) {
  const int64_t Vl = local.t().dim(1);
  ASSIGN_OR_RETURN(std::vector<float> pairs,
                   GatherRankReductions(local, valid_vocab, 2, [&](const Tensor& row, int64_t valid, Tensor& out) {
                     backend_.ArgMax(row, valid, out);
                   }));
  // Ranks hold ascending id ranges: strictly larger wins, so a tie keeps the lower rank's (lower) id.
  int32_t token = 0;
  float top = -std::numeric_limits<float>::infinity();
  for (size_t r = 0; 2 * r < pairs.size(); ++r) {
    const float value = pairs[2 * r], id = pairs[2 * r + 1];
    if (id >= 0 && value > top) {
      top = value;
      token = static_cast<int32_t>(static_cast<int64_t>(r) * Vl + static_cast<int64_t>(id));
    }
  }
  return token;
}

absl::StatusOr<cpu::LogitsSummary> Model::SummarizeLogits(const Buffer& local, int64_t valid_vocab, int64_t k) {
  ASSIGN_OR_RETURN(std::vector<float> parts,
                   GatherRankReductions(local, valid_vocab, 2 * k + 2, [&](const Tensor& row, int64_t valid, Tensor& out) {
                     backend_.TopLogits(row, valid, k, out);
                   }));
  return cpu::MergeTopLogits(parts.data(), comm_.size(), k, local.t().dim(1));
}

absl::StatusOr<std::vector<float>> Model::GatherLogits(const Buffer& local) {
  const int64_t T = local.t().dim(0), Vl = local.t().dim(1), world = comm_.size();
  std::vector<float> all(world * T * Vl), out(T * Vl * world);
  if (world == 1) {
    backend_.CopyToHost(local.t(), out.data());
    return out;
  }
  Buffer gathered = backend_.Alloc(local.t().dtype, {world, T, Vl});
  RETURN_IF_ERROR(comm_.AllGather(local.t(), gathered.t()));
  backend_.CopyToHost(gathered.t(), all.data());
  // all is [world][T][Vl]; logits are [T][world·Vl].
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(all.begin() + (r * T + t) * Vl, Vl, out.begin() + t * world * Vl + r * Vl);
    }
  }
  return out;
}

}  // namespace q38
