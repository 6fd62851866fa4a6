// The qwen4_exp model configuration: config.json (outer `qwen4_exp` with `text_config`) and
// generation_config.json, parsed once into typed structs and validated fail-closed. Nothing
// downstream reads JSON; every shape the model and the kernels rely on is checked here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace q38 {

enum class LayerType { kGatedDeltaNet, kAttention };

struct ModelConfig {
  std::string model_type;  // outer, "qwen4_exp"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // H
  int num_layers = 0;
  std::vector<LayerType> layer_types;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;

  // Attention (QSA layers).
  int num_heads = 0;     // Hq
  int num_kv_heads = 0;  // Hkv
  int head_dim = 0;      // dh
  double rope_theta = 0;
  int rotary_dim = 0;  // head_dim · partial_rotary_factor

  // QSA indexer.
  int indexer_heads = 0;     // Hi
  int indexer_head_dim = 0;  // di
  int indexer_budget = 0;    // B tokens
  int indexer_compress_ratio = 0;  // r tokens per block

  // Gated DeltaNet.
  int conv_kernel = 0;       // linear_conv_kernel_dim
  int gdn_key_heads = 0;     // Hk
  int gdn_value_heads = 0;   // Hv
  int gdn_key_dim = 0;       // dk
  int gdn_value_dim = 0;     // dv
  bool gdn_output_gate_sigmoid = true;  // output_gate_type: sigmoid (else silu)

  // MoE.
  int num_experts = 0;       // E
  int experts_per_token = 0; // k
  int64_t moe_intermediate = 0;     // I
  int64_t shared_intermediate = 0;  // Is

  // Hyper-connections.
  int hc_count = 0;   // S
  int64_t hc_lowrank = 0;  // R

  // PLE (hashed n-gram embedding).
  std::vector<int> ple_layers;  // 0-based (config.json stores them 1-based)
  int64_t ple_embed_dim = 0;    // D
  int ple_conv_kernel = 0;
  int ngram_size = 0;           // N
  int heads_per_ngram = 0;
  int64_t ngram_vocab_size_base = 0;
  int64_t ngram_vocab_divisor = 0;  // make_ngram_vocab_size_divisible_by
  int split_ngram_parts = 0;
  uint64_t seed = 1234;

  std::vector<int64_t> eos_token_ids;  // text_config.eos_token_id; [0] resets PLE n-grams
  int64_t bos_token_id = -1;

  // Derived.
  int64_t gdn_qk_width() const { return int64_t{gdn_key_heads} * gdn_key_dim; }
  int64_t gdn_v_width() const { return int64_t{gdn_value_heads} * gdn_value_dim; }
  int64_t gdn_conv_channels() const { return 2 * gdn_qk_width() + gdn_v_width(); }
  int64_t hc_width() const { return hc_count * hidden_size; }
  int ple_heads() const { return (ngram_size - 1) * heads_per_ngram; }
  int64_t ple_row_width() const { return ple_embed_dim / ple_heads(); }
  int64_t ple_eos() const { return eos_token_ids.front(); }
  bool is_attention(int layer) const { return layer_types[layer] == LayerType::kAttention; }
  bool has_ple(int layer) const;
};

// generation_config.json: the stop set and the checkpoint's sampling.
struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  bool do_sample = false;
};

// The released Qwen3.8-Flash-Next text geometry (docs/model.md §1) and the tiny test geometry: every
// feature present, small enough that a CPU runs it in milliseconds.
ModelConfig ReleaseModelConfig();
ModelConfig TinyModelConfig();

// config.json text in the release's layout (outer qwen4_exp, text_config), parseable back.
std::string ModelConfigJson(const ModelConfig& c);
std::string GenerationConfigJson(const GenerationConfig& g);

// Parses config.json text. Errors name the offending field, e.g. "text_config.head_dim: ...".
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);
absl::StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text);

// Reads and parses `dir/config.json` and `dir/generation_config.json`.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir);

absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace q38
