#include "worker/model/weights.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/model/checkpoint_source.h"
#include "worker/model/synthetic_source.h"
#include "worker/model/tensor_schema.h"

namespace q38 {
namespace {

// Reads the tensors the schema lists from a source, by name; the TP plan (which rows and columns
// a rank holds) is the caller's.
class Reader {
 public:
  Reader(const TensorSchema& schema, WeightSource& source, Backend& backend)
      : schema_(schema), source_(source), backend_(backend) {}

  absl::StatusOr<const TensorSpec*> Spec(const std::string& name) const {
    const TensorSpec* t = schema_.Find(name);
    if (t == nullptr) return absl::InternalError(absl::StrCat("tensor schema: the model has no tensor ", name));
    return t;
  }
  // A floating-point tensor in the backend's weight format: the given row ranges (all when
  // empty) and columns [cols.first, +cols.second) of each row (all when cols.second < 0).
  absl::StatusOr<Buffer> Dense(const std::string& name, const Ranges& rows = {}, Range cols = {0, -1}) {
    ASSIGN_OR_RETURN(const TensorSpec* t, Spec(name));
    return source_.Floats(*t, rows, cols, /*f32=*/false);
  }
  // The same kept in FP32 on every backend, for gate constants the FP16 range would coarsen.
  absl::StatusOr<Buffer> DenseF32(const std::string& name, const Ranges& rows) {
    ASSIGN_OR_RETURN(const TensorSpec* t, Spec(name));
    return source_.Floats(*t, rows, {0, -1}, /*f32=*/true);
  }

  WeightSource& source() { return source_; }
  Backend& backend() { return backend_; }

 private:
  const TensorSchema& schema_;
  WeightSource& source_;
  Backend& backend_;
};

absl::Status Divisible(int64_t n, int world, absl::string_view what) {
  if (n % world == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", what, " (", n,
                                                 ") is not divisible by the TP size ", world));
}

// Projections of one input, each [rows, K], stacked in order into one matrix.
StackedProjection Stack(Backend& backend, const std::vector<Buffer>& parts) {
  StackedProjection s;
  int64_t total = 0;
  for (const Buffer& p : parts) {
    s.rows.push_back(p.t().dim(0));
    total += p.t().dim(0);
  }
  s.weight = backend.Alloc(parts.front().t().dtype, {total, parts.front().t().dim(1)});
  int64_t at = 0;
  for (const Buffer& p : parts) {
    Tensor rows = s.weight.t().Rows(at, p.t().dim(0));
    backend.Copy(p.t(), rows);
    at += p.t().dim(0);
  }
  return s;
}

absl::StatusOr<HcWeights> LoadHc(Reader& R, const std::string& p, bool inject) {
  HcWeights hc;
  ASSIGN_OR_RETURN(hc.norm, R.Dense(p + "hc_norm.weight"));
  ASSIGN_OR_RETURN(hc.up, R.Dense(p + "input_mix_weight_up.weight"));
  // Down and inject both read the normalized state: stacked into one projection.
  std::vector<Buffer> down_inject(1);
  ASSIGN_OR_RETURN(down_inject[0], R.Dense(p + "input_mix_weight_down.weight"));
  if (inject) {
    ASSIGN_OR_RETURN(down_inject.emplace_back(), R.Dense(p + "block_inject_weight.weight"));
  }
  hc.down_inject = Stack(R.backend(), down_inject).weight;
  return hc;
}

absl::StatusOr<GdnWeights> LoadGdn(Reader& R, const ModelConfig& c, const std::string& p, const ShardSpec& s) {
  RETURN_IF_ERROR(Divisible(c.gdn_key_heads, s.world, "linear_num_key_heads"));
  RETURN_IF_ERROR(Divisible(c.gdn_value_heads, s.world, "linear_num_value_heads"));
  const int64_t dk = c.gdn_key_dim, dv = c.gdn_value_dim;
  const int64_t hk = c.gdn_key_heads / s.world, hv = c.gdn_value_heads / s.world, Dk = c.gdn_qk_width();
  // This rank's q, k and v channels inside the packed qkv rows (and the conv channels).
  const Ranges qkv_rows = {{s.rank * hk * dk, hk * dk}, {Dk + s.rank * hk * dk, hk * dk}, {2 * Dk + s.rank * hv * dv, hv * dv}};
  const Ranges v_rows = {{s.rank * hv * dv, hv * dv}};
  const Ranges heads = {{s.rank * hv, hv}};
  GdnWeights g;
  g.key_heads = hk;
  ASSIGN_OR_RETURN(Buffer qkv, R.Dense(p + "in_proj_qkv.weight", qkv_rows));
  ASSIGN_OR_RETURN(Buffer z, R.Dense(p + "in_proj_z.weight", v_rows));
  ASSIGN_OR_RETURN(Buffer b, R.Dense(p + "in_proj_b.weight", heads));
  ASSIGN_OR_RETURN(Buffer a, R.Dense(p + "in_proj_a.weight", heads));
  g.in = Stack(R.backend(), {qkv, z, b, a});
  ASSIGN_OR_RETURN(g.conv, R.Dense(p + "conv1d.weight", qkv_rows));
  ASSIGN_OR_RETURN(g.a_log, R.DenseF32(p + "A_log", heads));
  ASSIGN_OR_RETURN(g.dt_bias, R.DenseF32(p + "dt_bias", heads));
  ASSIGN_OR_RETURN(g.norm, R.Dense(p + "norm.weight"));
  ASSIGN_OR_RETURN(g.out, R.Dense(p + "out_proj.weight", {}, {s.rank * hv * dv, hv * dv}));
  return g;
}

absl::StatusOr<AttentionWeights> LoadAttention(Reader& R, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  RETURN_IF_ERROR(Divisible(c.num_heads, s.world, "num_attention_heads"));
  const int64_t dh = c.head_dim, hq = c.num_heads / s.world;
  // With fewer KV heads than ranks, each KV head is held by world/Hkv consecutive ranks.
  const int64_t hkv = std::max<int64_t>(c.num_kv_heads / s.world, 1);
  if (c.num_kv_heads >= s.world) RETURN_IF_ERROR(Divisible(c.num_kv_heads, s.world, "num_key_value_heads"));
  else RETURN_IF_ERROR(Divisible(s.world, c.num_kv_heads, "the TP size over num_key_value_heads"));
  const int64_t kv0 = static_cast<int64_t>(s.rank) * c.num_kv_heads / s.world;
  Ranges q_rows, gate_rows;
  for (int64_t h = s.rank * hq; h < (s.rank + 1) * hq; ++h) {
    q_rows.push_back({2 * dh * h, dh});  // per head: query rows, then gate rows
    gate_rows.push_back({2 * dh * h + dh, dh});
  }
  const int64_t Hi = c.indexer_heads, di = c.indexer_head_dim;
  AttentionWeights a;
  a.q_heads = hq;
  a.kv_heads = hkv;
  ASSIGN_OR_RETURN(Buffer q, R.Dense(p + "q_proj.weight", q_rows));
  ASSIGN_OR_RETURN(Buffer gate, R.Dense(p + "q_proj.weight", gate_rows));
  ASSIGN_OR_RETURN(Buffer k, R.Dense(p + "k_proj.weight", {{kv0 * dh, hkv * dh}}));
  ASSIGN_OR_RETURN(Buffer v, R.Dense(p + "v_proj.weight", {{kv0 * dh, hkv * dh}}));
  ASSIGN_OR_RETURN(Buffer index_q, R.Dense(p + "indexer.index_qk_proj.weight", {{0, Hi * di}}));
  ASSIGN_OR_RETURN(Buffer index_k, R.Dense(p + "indexer.index_qk_proj.weight", {{Hi * di, di}}));
  a.in = Stack(R.backend(), {q, gate, k, v, index_q, index_k});
  ASSIGN_OR_RETURN(a.o, R.Dense(p + "o_proj.weight", {}, {s.rank * hq * dh, hq * dh}));
  ASSIGN_OR_RETURN(a.q_norm, R.Dense(p + "q_norm.weight"));
  ASSIGN_OR_RETURN(a.k_norm, R.Dense(p + "k_norm.weight"));
  ASSIGN_OR_RETURN(a.index_q_norm, R.Dense(p + "indexer.q_layernorm.weight"));
  ASSIGN_OR_RETURN(a.index_k_norm, R.Dense(p + "indexer.k_layernorm.weight"));
  return a;
}

// ModelOpt NVFP4 experts, one set of tensors per expert and projection (docs/model.md §14.1–14.2):
// gate and up rows [rank·I', +I') stacked into one 2I' projection, down columns [rank·I', +I').
absl::StatusOr<ExpertWeights> LoadNvfp4Experts(Reader& R, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  const int64_t Il = c.moe_intermediate / s.world;
  if (Il % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: moe_intermediate_size / TP = ", Il,
                                                   " is not a multiple of the NVFP4 block of 16"));
  }
  Nvfp4ExpertSpecs specs;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    for (auto [proj, list] : {std::pair{"gate_proj.", &specs.gate}, std::pair{"up_proj.", &specs.up},
                              std::pair{"down_proj.", &specs.down}}) {
      const std::string q = absl::StrCat(p, "experts.", e, ".", proj);
      Nvfp4Projection& x = list->emplace_back();
      ASSIGN_OR_RETURN(x.codes, R.Spec(q + "weight"));
      ASSIGN_OR_RETURN(x.scales, R.Spec(q + "weight_scale"));
      ASSIGN_OR_RETURN(x.global, R.Spec(q + "weight_scale_2"));
      ASSIGN_OR_RETURN(x.input_scale, R.Spec(q + "input_scale"));
    }
  }
  ExpertWeights x;
  x.nvfp4 = true;
  x.intermediate = Il;
  ASSIGN_OR_RETURN(x.q, R.source().Nvfp4Routed(specs, {s.rank * Il, Il}));
  return x;
}

// The official BF16 release fuses every expert into gate_up_proj [E, 2I, H] and down_proj [E, H, I],
// read here as [E·2I, H] and [E·H, I] rows.
absl::StatusOr<ExpertWeights> LoadDenseExperts(Reader& R, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate, Il = I / s.world;
  Ranges gu_rows, dn_rows;
  for (int64_t e = 0; e < E; ++e) {
    gu_rows.push_back({e * 2 * I + s.rank * Il, Il});
    gu_rows.push_back({e * 2 * I + I + s.rank * Il, Il});
    dn_rows.push_back({e * H, H});
  }
  ExpertWeights x;
  x.nvfp4 = false;
  x.intermediate = Il;
  ASSIGN_OR_RETURN(x.dense.gate_up, R.Dense(p + "experts.gate_up_proj", gu_rows));
  ASSIGN_OR_RETURN(x.dense.down, R.Dense(p + "experts.down_proj", dn_rows, {s.rank * Il, Il}));
  x.dense.gate_up.t().shape = {E, 2 * Il, H};
  x.dense.down.t().shape = {E, H, Il};
  return x;
}

absl::StatusOr<MoeWeights> LoadMoe(Reader& R, const ModelConfig& c, const std::string& p, const ShardSpec& s,
                                   bool nvfp4) {
  RETURN_IF_ERROR(Divisible(c.moe_intermediate, s.world, "moe_intermediate_size"));
  RETURN_IF_ERROR(Divisible(c.shared_intermediate, s.world, "shared_expert_intermediate_size"));
  const int64_t Isl = c.shared_intermediate / s.world;
  MoeWeights m;
  ASSIGN_OR_RETURN(Buffer router, R.Dense(p + "gate.weight"));
  ASSIGN_OR_RETURN(Buffer shared_gate, R.Dense(p + "shared_expert_gate.weight"));
  // Gate rows then up rows of this rank, one part, so that one output feeds SiluMul.
  ASSIGN_OR_RETURN(Buffer gate, R.Dense(p + "shared_expert.gate_proj.weight", {{s.rank * Isl, Isl}}));
  ASSIGN_OR_RETURN(Buffer up, R.Dense(p + "shared_expert.up_proj.weight", {{s.rank * Isl, Isl}}));
  m.in = Stack(R.backend(), {router, Stack(R.backend(), {gate, up}).weight, shared_gate});
  ASSIGN_OR_RETURN(m.shared_down, R.Dense(p + "shared_expert.down_proj.weight", {}, {s.rank * Isl, Isl}));
  if (nvfp4) {
    ASSIGN_OR_RETURN(m.experts, LoadNvfp4Experts(R, c, p, s));
  } else {
    ASSIGN_OR_RETURN(m.experts, LoadDenseExperts(R, c, p, s));
  }
  return m;
}

absl::StatusOr<PleWeights> LoadPle(Reader& R, const ModelConfig& c, const std::string& p) {
  PleWeights w;
  w.hash = PleHash::Derive(PleHashParamsOf(c));
  ASSIGN_OR_RETURN(w.key, R.Dense(p + "key_proj.weight"));
  ASSIGN_OR_RETURN(w.value, R.Dense(p + "value_proj.weight"));
  ASSIGN_OR_RETURN(w.norm_key, R.Dense(p + "norm_key.weight"));
  ASSIGN_OR_RETURN(w.norm_query, R.Dense(p + "norm_query.weight"));
  ASSIGN_OR_RETURN(w.norm_conv, R.Dense(p + "norm_conv.weight"));
  ASSIGN_OR_RETURN(w.conv, R.Dense(p + "conv1d.weight"));
  const std::string e = p + "ple_embedding.";
  for (const char* name : {"layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets"}) {
    ASSIGN_OR_RETURN(const TensorSpec* t, R.Spec(e + name));
    RETURN_IF_ERROR(R.source().CheckValues(*t));
  }
  const int parts = c.split_ngram_parts;
  if (w.hash.table_rows % parts != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", w.hash.table_rows, " n-gram table rows do not split into ",
                                                   parts, " shards (split_ngram_parts)"));
  }
  std::vector<const TensorSpec*> shards;
  for (int sh = 0; sh < parts; ++sh) {
    ASSIGN_OR_RETURN(shards.emplace_back(), R.Spec(absl::StrCat(e, "ngram_embedding.shard_", sh, ".weight")));
  }
  ASSIGN_OR_RETURN(const TensorSpec* scale, R.Spec(e + "ngram_embedding.weight_scale"));
  ASSIGN_OR_RETURN(w.table, R.source().NgramTable(shards, *scale));
  return w;
}

// Reads (or draws) every tensor for one rank.
absl::StatusOr<ModelWeights> Build(const ModelConfig& c, WeightSource& source, Backend& backend, const ShardSpec& s,
                                   const std::function<void(int, int)>& progress) {
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", s.rank, " outside a TP group of ", s.world));
  }
  RETURN_IF_ERROR(Divisible(c.vocab_size, s.world, "vocab_size"));
  ASSIGN_OR_RETURN(const SchemaOptions layout, source.Layout());
  const TensorSchema schema(c, layout);
  Reader R(schema, source, backend);
  const std::string& P = layout.prefix;
  const int64_t Vl = c.vocab_size / s.world;
  ModelWeights m;
  m.vocab_begin = s.rank * Vl;
  m.experts_nvfp4 = layout.nvfp4_experts;
  ASSIGN_OR_RETURN(m.embed, R.Dense(P + "embed_tokens.weight"));
  ASSIGN_OR_RETURN(m.lm_head, R.Dense("lm_head.weight", {{m.vocab_begin, Vl}}));
  ASSIGN_OR_RETURN(m.mixer, LoadHc(R, P + "hyper_connection_mixer.", /*inject=*/false));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string lp = absl::StrCat(P, "layers.", i, ".");
    LayerWeights l;
    l.type = c.layer_types[i];
    ASSIGN_OR_RETURN(l.attn_hc, LoadHc(R, lp + "attn_hyper_connection.", true));
    ASSIGN_OR_RETURN(l.mlp_hc, LoadHc(R, lp + "mlp_hyper_connection.", true));
    if (c.is_attention(i)) {
      ASSIGN_OR_RETURN(l.attn, LoadAttention(R, c, lp + "self_attn.", s));
    } else {
      ASSIGN_OR_RETURN(l.gdn, LoadGdn(R, c, lp + "linear_attn.", s));
    }
    ASSIGN_OR_RETURN(l.moe, LoadMoe(R, c, lp + "mlp.", s, m.experts_nvfp4));
    if (c.has_ple(i)) {
      ASSIGN_OR_RETURN(PleWeights ple, LoadPle(R, c, lp + "ple."));
      l.ple = std::move(ple);
    }
    m.layers.push_back(std::move(l));
    if (progress) progress(i + 1, c.num_layers);
  }
  RETURN_IF_ERROR(source.CheckAllUsed());
  m.overflow_count = backend.overflow_count();
  return m;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& config, const TensorStore& store, Backend& backend,
                                         const ShardSpec& shard, const std::function<void(int, int)>& progress) {
  CheckpointSource source(store, backend);
  return Build(config, source, backend, shard, progress);
}

absl::StatusOr<ModelWeights> SyntheticWeights(const ModelConfig& config, Backend& backend, const ShardSpec& shard,
                                              uint64_t seed, const std::function<void(int, int)>& progress) {
  SyntheticSource source(backend, seed);
  return Build(config, source, backend, shard, progress);
}

}  // namespace q38
