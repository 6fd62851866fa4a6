#include "worker/model/tensor_schema.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace q38 {

// Appends specs in order; each helper is one module of the model (docs/model.md §2).
class SchemaBuilder {
 public:
  explicit SchemaBuilder(TensorSchema& s) : s_(s) {}

  // A floating-point tensor drawn uniform in center ± spread.
  TensorSpec& Float(const std::string& name, std::vector<int64_t> shape, TpSplit split, float spread, float center = 0) {
    TensorSpec& t = Add(name, std::move(shape), {DType::kBF16, DType::kF16, DType::kF32}, split);
    t.spread = spread;
    t.center = center;
    return t;
  }
  // A weight of fan-in `in`: spread gain·sqrt(3/in) keeps activations of order one.
  TensorSpec& Linear(const std::string& name, int64_t out, int64_t in, TpSplit split, float gain = 1.0f) {
    return Float(name, {out, in}, split, gain * std::sqrt(3.0f / static_cast<float>(in)));
  }
  // A one-value F32 (or BF16) constant, stored as [] by the generator.
  void Scalar(const std::string& name, float value, std::vector<DType> dtypes, std::vector<int64_t> shape) {
    TensorSpec& t = Add(name, std::move(shape), std::move(dtypes), TpSplit::kReplicated);
    t.draw = Draw::kConstant;
    t.center = value;
    t.scalar = true;
  }
  TensorSpec& Add(const std::string& name, std::vector<int64_t> shape, std::vector<DType> dtypes, TpSplit split) {
    s_.index_[name] = s_.tensors_.size();
    s_.tensors_.push_back({.name = name, .shape = std::move(shape), .dtypes = std::move(dtypes), .split = split});
    return s_.tensors_.back();
  }

  void Hc(const ModelConfig& c, const std::string& p, bool inject) {
    const int64_t W = c.hc_width(), R = c.hc_lowrank;
    Float(p + "hc_norm.weight", {W}, TpSplit::kReplicated, 0.1f);
    Linear(p + "input_mix_weight_down.weight", R, W, TpSplit::kReplicated);
    Linear(p + "input_mix_weight_up.weight", W, R, TpSplit::kReplicated);
    if (inject) Linear(p + "block_inject_weight.weight", c.hc_count, W, TpSplit::kReplicated);
  }

  void Gdn(const ModelConfig& c, const std::string& p) {
    const int64_t H = c.hidden_size, C = c.gdn_conv_channels(), Dv = c.gdn_v_width(), Hv = c.gdn_value_heads;
    Linear(p + "in_proj_qkv.weight", C, H, TpSplit::kRows);
    Linear(p + "in_proj_z.weight", Dv, H, TpSplit::kRows);
    Linear(p + "in_proj_b.weight", Hv, H, TpSplit::kRows);
    Linear(p + "in_proj_a.weight", Hv, H, TpSplit::kRows);
    Float(p + "conv1d.weight", {C, 1, c.conv_kernel}, TpSplit::kRows, 0.5f);
    Float(p + "dt_bias", {Hv}, TpSplit::kRows, 0.5f);
    Float(p + "A_log", {Hv}, TpSplit::kRows, 1.0f, 0.5f);  // decay rates e^{A_log} between 0.6 and 4.5
    Float(p + "norm.weight", {c.gdn_value_dim}, TpSplit::kReplicated, 0.1f, 1.0f);
    Linear(p + "out_proj.weight", H, Dv, TpSplit::kColumns);
  }

  void Attention(const ModelConfig& c, const std::string& p) {
    const int64_t H = c.hidden_size, dh = c.head_dim, di = c.indexer_head_dim;
    Linear(p + "q_proj.weight", int64_t{c.num_heads} * 2 * dh, H, TpSplit::kRows);
    Linear(p + "k_proj.weight", int64_t{c.num_kv_heads} * dh, H, TpSplit::kRows);
    Linear(p + "v_proj.weight", int64_t{c.num_kv_heads} * dh, H, TpSplit::kRows);
    Linear(p + "o_proj.weight", H, int64_t{c.num_heads} * dh, TpSplit::kColumns);
    Float(p + "q_norm.weight", {dh}, TpSplit::kReplicated, 0.1f);
    Float(p + "k_norm.weight", {dh}, TpSplit::kReplicated, 0.1f);
    // Each indexer query head is the key projection plus noise, so scores are mostly positive as
    // in a trained indexer: random ones leave many blocks at relu(·) = 0, whose top-k ties any
    // implementation may break its own way (docs/model.md §16.2).
    TensorSpec& qk = Linear(p + "indexer.index_qk_proj.weight", (c.indexer_heads + 1) * di, H, TpSplit::kReplicated);
    qk.draw = Draw::kIndexerQk;
    qk.head_rows = di;
    Float(p + "indexer.q_layernorm.weight", {di}, TpSplit::kReplicated, 0.1f);
    Float(p + "indexer.k_layernorm.weight", {di}, TpSplit::kReplicated, 0.1f);
  }

  // ModelOpt NVFP4 [N, K] (docs/model.md §14.1): E2M1 codes, E4M3 block scales near 1, a global
  // that gives the dequantized weight a spread of about 1/sqrt(K), and the unused input scale.
  void Nvfp4(const std::string& p, int64_t N, int64_t K) {
    Add(p + "weight", {N, K / 2}, {DType::kU8}, TpSplit::kExperts).draw = Draw::kNvfp4Codes;
    Add(p + "weight_scale", {N, K / 16}, {DType::kF8E4M3, DType::kU8}, TpSplit::kExperts).draw = Draw::kNvfp4Scales;
    Scalar(p + "weight_scale_2", 1.0f / (3.5f * std::sqrt(static_cast<float>(K))), {DType::kF32, DType::kBF16}, {});
    Scalar(p + "input_scale", 1.0f / (6.0f * 448.0f), {DType::kF32, DType::kBF16}, {});
  }

  void Moe(const ModelConfig& c, const std::string& p, bool nvfp4) {
    const int64_t H = c.hidden_size, I = c.moe_intermediate, Is = c.shared_intermediate, E = c.num_experts;
    Linear(p + "gate.weight", E, H, TpSplit::kReplicated, 4.0f);  // a sharper router than uniform, as trained ones are
    Linear(p + "shared_expert_gate.weight", 1, H, TpSplit::kReplicated);
    Linear(p + "shared_expert.gate_proj.weight", Is, H, TpSplit::kRows);
    Linear(p + "shared_expert.up_proj.weight", Is, H, TpSplit::kRows);
    Linear(p + "shared_expert.down_proj.weight", H, Is, TpSplit::kColumns);
    if (!nvfp4) {
      Float(p + "experts.gate_up_proj", {E, 2 * I, H}, TpSplit::kExperts, std::sqrt(3.0f / H));
      Float(p + "experts.down_proj", {E, H, I}, TpSplit::kExperts, std::sqrt(3.0f / I));
      return;
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = absl::StrCat(p, "experts.", e, ".");
      Nvfp4(ep + "gate_proj.", I, H);
      Nvfp4(ep + "up_proj.", I, H);
      Nvfp4(ep + "down_proj.", H, I);
    }
  }

  void Ple(const ModelConfig& c, const std::string& p, bool fp8) {
    const int64_t W = c.hc_width(), H = c.hidden_size, D = c.ple_embed_dim;
    Linear(p + "key_proj.weight", W, D, TpSplit::kReplicated);
    Linear(p + "value_proj.weight", H, D, TpSplit::kReplicated);
    Float(p + "norm_key.weight", {W}, TpSplit::kReplicated, 0.1f);
    Float(p + "norm_query.weight", {W}, TpSplit::kReplicated, 0.1f);
    Float(p + "norm_conv.weight", {W}, TpSplit::kReplicated, 0.1f);
    Float(p + "conv1d.weight", {W, 1, c.ple_conv_kernel}, TpSplit::kReplicated, 0.5f);
    const PleHash hash = PleHash::Derive(PleHashParamsOf(c));
    const std::string e = p + "ple_embedding.";
    for (auto [name, values] : {std::pair{"layer_multipliers", &hash.multipliers},
                                std::pair{"ngram_heads_vocab_sizes", &hash.head_sizes},
                                std::pair{"ngram_heads_offsets", &hash.head_offsets}}) {
      TensorSpec& t = Add(e + name, {static_cast<int64_t>(values->size())}, {DType::kI64}, TpSplit::kReplicated);
      t.draw = Draw::kValues;
      t.values = *values;
    }
    const int64_t rows = hash.table_rows / c.split_ngram_parts, dp = c.ple_row_width();
    for (int s = 0; s < c.split_ngram_parts; ++s) {
      const std::string name = absl::StrCat(e, "ngram_embedding.shard_", s, ".weight");
      if (fp8) {
        Add(name, {rows, dp}, {DType::kF8E4M3, DType::kBF16, DType::kF32}, TpSplit::kReplicated).draw = Draw::kFp8Bytes;
      } else {
        Add(name, {rows, dp}, {DType::kBF16, DType::kF8E4M3, DType::kF32}, TpSplit::kReplicated).spread = 1.0f;
      }
    }
    if (fp8) Scalar(e + "ngram_embedding.weight_scale", 1.0f / 256.0f, {DType::kBF16, DType::kF32}, {1});
  }

 private:
  TensorSchema& s_;
};

TensorSchema::TensorSchema(const ModelConfig& c, const SchemaOptions& o) {
  SchemaBuilder b(*this);
  const std::string& P = o.prefix;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  b.Float(P + "embed_tokens.weight", {V, H}, TpSplit::kReplicated, 1.0f);
  b.Linear("lm_head.weight", V, H, TpSplit::kRows, 2.0f);
  b.Hc(c, P + "hyper_connection_mixer.", false);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string lp = absl::StrCat(P, "layers.", i, ".");
    b.Hc(c, lp + "attn_hyper_connection.", true);
    b.Hc(c, lp + "mlp_hyper_connection.", true);
    if (c.is_attention(i)) {
      b.Attention(c, lp + "self_attn.");
    } else {
      b.Gdn(c, lp + "linear_attn.");
    }
    b.Moe(c, lp + "mlp.", o.nvfp4_experts);
    if (c.has_ple(i)) b.Ple(c, lp + "ple.", o.fp8_ple);
  }
}

PleHashParams PleHashParamsOf(const ModelConfig& c) {
  return {c.vocab_size, c.ngram_size, c.heads_per_ngram, c.ngram_vocab_size_base, c.ngram_vocab_divisor, c.seed, 0};
}

const TensorSpec* TensorSchema::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace q38
