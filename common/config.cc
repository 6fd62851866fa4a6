#include "common/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_join.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace q38 {
namespace {

using nlohmann::json;

absl::Status ConfigError(absl::string_view path, absl::string_view what) { return q38::FieldError("config", path, what); }

absl::StatusOr<LayerType> ParseLayerType(const json& v, absl::string_view path) {
  if (!v.is_string()) return ConfigError(path, "must be a string");
  const std::string s = v.get<std::string>();
  if (s == "linear_attention") return LayerType::kGatedDeltaNet;
  // Every attention label of the model's history runs the QSA indexer (docs/model.md §1.3).
  if (s == "full_attention" || s == "qwen_sparse_attention" || s == "hybrid_indexed" ||
      s == "deepseek_sparse_attention") {
    return LayerType::kAttention;
  }
  return ConfigError(path, absl::StrCat("unknown layer type \"", s, "\""));
}

absl::Status ParseRope(const Fields& f, ModelConfig& c) {
  double partial = 0;
  if (f.Has("rope_parameters")) {
    const json& rp = f.At("rope_parameters");
    if (!rp.is_object()) return ConfigError(f.Path("rope_parameters"), "must be an object");
    Fields r(rp, "config", f.Path("rope_parameters."));
    ASSIGN_OR_RETURN(std::string type, r.String("rope_type"));
    if (type != "default") {
      return ConfigError(r.Path("rope_type"), absl::StrCat("only \"default\" is supported, got \"", type, "\""));
    }
    ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta"));
    if (r.Has("partial_rotary_factor")) {
      ASSIGN_OR_RETURN(partial, r.Number("partial_rotary_factor"));
    }
  } else {
    ASSIGN_OR_RETURN(c.rope_theta, f.Number("rope_theta"));
  }
  if (partial == 0) {
    ASSIGN_OR_RETURN(partial, f.Number("partial_rotary_factor"));
  }
  if (c.rope_theta <= 0) return ConfigError(f.Path("rope_theta"), "must be positive");
  const double rd = c.head_dim * partial;
  if (!(partial > 0 && partial <= 1) || rd != std::floor(rd) || static_cast<int>(rd) % 2 != 0) {
    return ConfigError(f.Path("partial_rotary_factor"),
                      "head_dim · partial_rotary_factor must be an even whole number");
  }
  c.rotary_dim = static_cast<int>(rd);
  return absl::OkStatus();
}

absl::Status ParseText(const Fields& f, ModelConfig& c) {
#define Q38_INT(field, key) ASSIGN_OR_RETURN(c.field, f.PositiveInt(key))
  Q38_INT(vocab_size, "vocab_size");
  Q38_INT(hidden_size, "hidden_size");
  Q38_INT(num_layers, "num_hidden_layers");
  Q38_INT(max_position_embeddings, "max_position_embeddings");
  Q38_INT(num_heads, "num_attention_heads");
  Q38_INT(num_kv_heads, "num_key_value_heads");
  Q38_INT(head_dim, "head_dim");
  Q38_INT(indexer_heads, "indexer_n_heads");
  Q38_INT(indexer_head_dim, "indexer_head_dim");
  Q38_INT(indexer_budget, "indexer_budget");
  Q38_INT(indexer_compress_ratio, "indexer_compress_ratio");
  Q38_INT(conv_kernel, "linear_conv_kernel_dim");
  Q38_INT(gdn_key_heads, "linear_num_key_heads");
  Q38_INT(gdn_value_heads, "linear_num_value_heads");
  Q38_INT(gdn_key_dim, "linear_key_head_dim");
  Q38_INT(gdn_value_dim, "linear_value_head_dim");
  Q38_INT(num_experts, "num_experts");
  Q38_INT(experts_per_token, "num_experts_per_tok");
  Q38_INT(moe_intermediate, "moe_intermediate_size");
  Q38_INT(shared_intermediate, "shared_expert_intermediate_size");
  Q38_INT(hc_count, "hc_count");
  Q38_INT(hc_lowrank, "hc_lowrank");
  Q38_INT(ple_embed_dim, "ple_embed_dim");
  Q38_INT(ple_conv_kernel, "ple_conv_kernel_size");
  Q38_INT(ngram_size, "ngram_size");
  Q38_INT(heads_per_ngram, "heads_per_ngram");
  Q38_INT(ngram_vocab_size_base, "ngram_vocab_size_base");
  Q38_INT(ngram_vocab_divisor, "make_ngram_vocab_size_divisible_by");
#undef Q38_INT
  ASSIGN_OR_RETURN(int64_t split, f.IntOr("split_ngram_parts", 512));
  c.split_ngram_parts = static_cast<int>(split);
  ASSIGN_OR_RETURN(int64_t seed, f.IntOr("seed", 1234));
  if (seed < 0) return ConfigError(f.Path("seed"), "must be non-negative");
  c.seed = static_cast<uint64_t>(seed);
  if (f.Has("rms_norm_eps")) {
    ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("rms_norm_eps"));
  }
  if (!(c.rms_norm_eps > 0)) return ConfigError(f.Path("rms_norm_eps"), "must be positive");
  RETURN_IF_ERROR(ParseRope(f, c));

  ASSIGN_OR_RETURN(c.eos_token_ids, f.IntOrList("eos_token_id"));
  ASSIGN_OR_RETURN(c.bos_token_id, f.IntOr("bos_token_id", -1));
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) return ConfigError(f.Path("eos_token_id"), "outside the vocabulary");
  }

  // Settings the model supports only one way: refuse rather than compute something else.
  ASSIGN_OR_RETURN(std::string act, f.String("hidden_act"));
  if (act != "silu") return ConfigError(f.Path("hidden_act"), "only silu is supported");
  ASSIGN_OR_RETURN(bool bias, f.BoolOr("attention_bias", false));
  if (bias) return ConfigError(f.Path("attention_bias"), "attention bias is not supported");
  ASSIGN_OR_RETURN(bool norm_topk, f.BoolOr("norm_topk_prob", true));
  if (!norm_topk) return ConfigError(f.Path("norm_topk_prob"), "only true is supported");
  ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", false));
  if (tied) return ConfigError(f.Path("tie_word_embeddings"), "tied embeddings are not supported");
  ASSIGN_OR_RETURN(int64_t idx_kv, f.IntOr("indexer_kv_heads", 1));
  if (idx_kv != 1) return ConfigError(f.Path("indexer_kv_heads"), "must be 1");
  if (f.Has("output_gate_type")) {
    ASSIGN_OR_RETURN(std::string gate, f.String("output_gate_type"));
    if (gate != "sigmoid" && gate != "silu") {
      return ConfigError(f.Path("output_gate_type"), absl::StrCat("unknown gate \"", gate, "\""));
    }
    c.gdn_output_gate_sigmoid = gate == "sigmoid";
  }
  if (f.Has("mamba_ssm_dtype")) {
    ASSIGN_OR_RETURN(std::string ssm, f.String("mamba_ssm_dtype"));
    if (ssm != "float32") return ConfigError(f.Path("mamba_ssm_dtype"), "the recurrent state must be float32");
  }

  if (!f.Has("layer_types")) return ConfigError(f.Path("layer_types"), "missing");
  const json& lt = f.At("layer_types");
  if (!lt.is_array()) return ConfigError(f.Path("layer_types"), "must be a list");
  if (static_cast<int>(lt.size()) != c.num_layers) {
    return ConfigError(f.Path("layer_types"), absl::StrCat("has ", lt.size(), " entries for ",
                                                          c.num_layers, " layers"));
  }
  for (size_t i = 0; i < lt.size(); ++i) {
    ASSIGN_OR_RETURN(LayerType t, ParseLayerType(lt[i], absl::StrCat(f.Path("layer_types"), "[", i, "]")));
    c.layer_types.push_back(t);
  }

  if (!f.Has("ple_layer_ids") || !f.At("ple_layer_ids").is_array()) {
    return ConfigError(f.Path("ple_layer_ids"), "missing or not a list");
  }
  for (const json& v : f.At("ple_layer_ids")) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > c.num_layers) {
      return ConfigError(f.Path("ple_layer_ids"), "entries are 1-based layer numbers in [1, num_hidden_layers]");
    }
    c.ple_layers.push_back(static_cast<int>(v.get<int64_t>() - 1));
  }
  return absl::OkStatus();
}

// Cross-field consistency: every divisibility the math and the TP plan rely on.
absl::Status Validate(const ModelConfig& c) {
  auto need = [](bool ok, absl::string_view field, absl::string_view why) {
    return ok ? absl::OkStatus() : ConfigError(absl::StrCat("text_config.", field), why);
  };
  RETURN_IF_ERROR(need(c.num_heads % c.num_kv_heads == 0, "num_key_value_heads", "must divide num_attention_heads"));
  RETURN_IF_ERROR(need(c.rotary_dim <= c.indexer_head_dim, "indexer_head_dim", "must be at least the rotary dims"));
  RETURN_IF_ERROR(need(c.gdn_value_heads % c.gdn_key_heads == 0, "linear_num_value_heads", "must be a multiple of linear_num_key_heads"));
  RETURN_IF_ERROR(need(c.experts_per_token <= c.num_experts, "num_experts_per_tok", "exceeds num_experts"));
  RETURN_IF_ERROR(need(c.moe_intermediate % 16 == 0, "moe_intermediate_size", "must be a multiple of 16 (NVFP4 blocks)"));
  RETURN_IF_ERROR(need(c.hidden_size % 16 == 0, "hidden_size", "must be a multiple of 16 (NVFP4 blocks)"));
  RETURN_IF_ERROR(need(c.indexer_budget % c.indexer_compress_ratio == 0, "indexer_budget", "must be a multiple of indexer_compress_ratio"));
  RETURN_IF_ERROR(need(c.ngram_size >= 2, "ngram_size", "must be at least 2"));
  RETURN_IF_ERROR(need(c.ple_embed_dim == c.hidden_size, "ple_embed_dim", "must equal hidden_size"));
  RETURN_IF_ERROR(need(c.ple_embed_dim % c.ple_heads() == 0, "ple_embed_dim", "must be divisible by (ngram_size-1)·heads_per_ngram"));
  RETURN_IF_ERROR(need(c.split_ngram_parts > 0, "split_ngram_parts", "must be positive"));
  RETURN_IF_ERROR(need(c.ngram_vocab_divisor % c.split_ngram_parts == 0 || c.split_ngram_parts % c.ngram_vocab_divisor == 0,
                       "split_ngram_parts", "must divide or be divided by make_ngram_vocab_size_divisible_by"));
  RETURN_IF_ERROR(need(c.ple_layers.size() <= 1, "ple_layer_ids", "at most one PLE layer is supported"));
  for (int l : c.ple_layers) {
    RETURN_IF_ERROR(need(!c.is_attention(l), "ple_layer_ids", "the PLE layer must be a linear_attention layer"));
  }
  RETURN_IF_ERROR(need(c.max_position_embeddings <= (int64_t{1} << 31), "max_position_embeddings", "too large"));
  return absl::OkStatus();
}

absl::StatusOr<json> ParseJson(const std::string& text, absl::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  return j;
}

}  // namespace

bool ModelConfig::has_ple(int layer) const {
  return std::find(ple_layers.begin(), ple_layers.end(), layer) != ple_layers.end();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  ASSIGN_OR_RETURN(json root, ParseJson(json_text, "config.json"));
  Fields outer(root, "config");
  ModelConfig c;
  ASSIGN_OR_RETURN(c.model_type, outer.String("model_type"));
  if (c.model_type != "qwen4_exp") {
    return ConfigError("model_type", absl::StrCat("expected \"qwen4_exp\", got \"", c.model_type, "\""));
  }
  if (!outer.Has("text_config") || !root.at("text_config").is_object()) {
    return ConfigError("text_config", "missing or not an object");
  }
  Fields text(root.at("text_config"), "config", "text_config.");
  RETURN_IF_ERROR(ParseText(text, c));
  RETURN_IF_ERROR(Validate(c));
  return c;
}

absl::StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text) {
  ASSIGN_OR_RETURN(json root, ParseJson(json_text, "generation_config.json"));
  Fields f(root, "config", "generation_config.");
  GenerationConfig g;
  ASSIGN_OR_RETURN(g.eos_token_ids, f.IntOrList("eos_token_id"));
  if (f.Has("temperature")) {
    ASSIGN_OR_RETURN(g.temperature, f.Number("temperature"));
  }
  if (f.Has("top_p")) {
    ASSIGN_OR_RETURN(g.top_p, f.Number("top_p"));
  }
  ASSIGN_OR_RETURN(int64_t top_k, f.IntOr("top_k", 0));
  g.top_k = static_cast<int>(top_k);
  ASSIGN_OR_RETURN(g.do_sample, f.BoolOr("do_sample", false));
  if (!(g.temperature >= 0)) return ConfigError(f.Path("temperature"), "must be non-negative");
  if (!(g.top_p > 0 && g.top_p <= 1)) return ConfigError(f.Path("top_p"), "must be in (0, 1]");
  if (g.top_k < 0) return ConfigError(f.Path("top_k"), "must be non-negative");
  return g;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
  return ParseModelConfig(text);
}

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/generation_config.json"));
  return ParseGenerationConfig(text);
}

}  // namespace q38

namespace q38 {
namespace {

nlohmann::json LayerTypesJson(const ModelConfig& c) {
  nlohmann::json out = nlohmann::json::array();
  for (LayerType t : c.layer_types) {
    out.push_back(t == LayerType::kAttention ? "full_attention" : "linear_attention");
  }
  return out;
}

std::vector<LayerType> HybridSchedule(int layers, int interval) {
  std::vector<LayerType> out;
  for (int i = 0; i < layers; ++i) {
    out.push_back(i % interval == interval - 1 ? LayerType::kAttention : LayerType::kGatedDeltaNet);
  }
  return out;
}

}  // namespace

ModelConfig ReleaseModelConfig() {
  ModelConfig c;
  c.model_type = "qwen4_exp";
  c.vocab_size = 248320;
  c.hidden_size = 2560;
  c.num_layers = 48;
  c.layer_types = HybridSchedule(48, 4);
  c.max_position_embeddings = 262144;
  c.num_heads = 24;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rope_theta = 1e7;
  c.rotary_dim = 64;
  c.indexer_heads = 4;
  c.indexer_head_dim = 128;
  c.indexer_budget = 2048;
  c.indexer_compress_ratio = 4;
  c.conv_kernel = 4;
  c.gdn_key_heads = 16;
  c.gdn_value_heads = 48;
  c.gdn_key_dim = 128;
  c.gdn_value_dim = 128;
  c.num_experts = 512;
  c.experts_per_token = 10;
  c.moe_intermediate = 640;
  c.shared_intermediate = 640;
  c.hc_count = 4;
  c.hc_lowrank = 320;
  c.ple_layers = {1};
  c.ple_embed_dim = 2560;
  c.ple_conv_kernel = 4;
  c.ngram_size = 3;
  c.heads_per_ngram = 8;
  c.ngram_vocab_size_base = 20000000;
  c.ngram_vocab_divisor = 128;
  c.split_ngram_parts = 128;
  c.eos_token_ids = {248044};
  c.bos_token_id = 248044;
  return c;
}

ModelConfig TinyModelConfig() {
  ModelConfig c = ReleaseModelConfig();
  c.vocab_size = 1024;
  c.hidden_size = 64;
  c.num_layers = 8;
  c.layer_types = HybridSchedule(8, 4);
  c.max_position_embeddings = 4096;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rope_theta = 10000;
  c.rotary_dim = 8;
  c.indexer_heads = 4;
  c.indexer_head_dim = 16;
  c.indexer_budget = 16;  // 4 blocks: any context past 19 tokens runs sparse selection
  c.gdn_key_heads = 4;
  c.gdn_value_heads = 8;
  c.gdn_key_dim = 16;
  c.gdn_value_dim = 16;
  c.num_experts = 32;
  c.experts_per_token = 4;
  c.moe_intermediate = 64;
  c.shared_intermediate = 64;
  c.hc_lowrank = 16;
  c.ple_embed_dim = 64;
  c.ngram_vocab_size_base = 1000;
  c.split_ngram_parts = 4;
  c.eos_token_ids = {1000};
  c.bos_token_id = 1000;
  return c;
}

std::string ModelConfigJson(const ModelConfig& c) {
  nlohmann::ordered_json text = {
      {"model_type", "qwen4_exp_text"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_layers},
      {"layer_types", LayerTypesJson(c)},
      {"full_attention_interval", 4},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"attention_bias", false},
      {"hidden_act", "silu"},
      {"rms_norm_eps", c.rms_norm_eps},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", c.rope_theta},
        {"partial_rotary_factor", static_cast<double>(c.rotary_dim) / c.head_dim},
        {"mrope_section", {c.rotary_dim / 2 - 2 * (c.rotary_dim / 6), c.rotary_dim / 6, c.rotary_dim / 6}},
        {"mrope_interleaved", true}}},
      {"partial_rotary_factor", static_cast<double>(c.rotary_dim) / c.head_dim},
      {"linear_conv_kernel_dim", c.conv_kernel},
      {"linear_num_key_heads", c.gdn_key_heads},
      {"linear_num_value_heads", c.gdn_value_heads},
      {"linear_key_head_dim", c.gdn_key_dim},
      {"linear_value_head_dim", c.gdn_value_dim},
      {"mamba_ssm_dtype", "float32"},
      {"output_gate_type", c.gdn_output_gate_sigmoid ? "sigmoid" : "silu"},
      {"num_experts", c.num_experts},
      {"num_experts_per_tok", c.experts_per_token},
      {"moe_intermediate_size", c.moe_intermediate},
      {"shared_expert_intermediate_size", c.shared_intermediate},
      {"router_aux_loss_coef", 0.001},
      {"hc_count", c.hc_count},
      {"hc_lowrank", c.hc_lowrank},
      {"ple_layer_ids", nlohmann::json::array()},
      {"ple_embed_dim", c.ple_embed_dim},
      {"ple_conv_kernel_size", c.ple_conv_kernel},
      {"ngram_size", c.ngram_size},
      {"heads_per_ngram", c.heads_per_ngram},
      {"ngram_vocab_size_base", c.ngram_vocab_size_base},
      {"make_ngram_vocab_size_divisible_by", c.ngram_vocab_divisor},
      {"split_ngram_parts", c.split_ngram_parts},
      {"ple_embedding_dtype", "float8_e4m3fn"},
      {"indexer_n_heads", c.indexer_heads},
      {"indexer_kv_heads", 1},
      {"indexer_head_dim", c.indexer_head_dim},
      {"indexer_budget", c.indexer_budget},
      {"indexer_compress_ratio", c.indexer_compress_ratio},
      {"tie_word_embeddings", false},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                                                   : nlohmann::json(c.eos_token_ids)},
      {"pad_token_id", nullptr},
      {"dtype", "bfloat16"},
  };
  if (c.seed != 1234) text["seed"] = c.seed;
  for (int l : c.ple_layers) text["ple_layer_ids"].push_back(l + 1);
  nlohmann::ordered_json root = {
      {"architectures", {"Qwen4ExpForConditionalGeneration"}},
      {"model_type", "qwen4_exp"},
      {"tie_word_embeddings", false},
      {"text_config", text},
  };
  return root.dump(2) + "\n";
}

std::string GenerationConfigJson(const GenerationConfig& g) {
  nlohmann::ordered_json root = {
      {"eos_token_id", g.eos_token_ids},
      {"do_sample", g.do_sample},
      {"temperature", g.temperature},
      {"top_p", g.top_p},
      {"top_k", g.top_k},
  };
  return root.dump(2) + "\n";
}

}  // namespace q38
