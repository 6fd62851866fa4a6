#include "tools/checkpoint/checkpoint_generator.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status.h"
#include "kernels/ple/ple_hash.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/modelopt_config.h"
#include "worker/checkpoint/safetensors_writer.h"

namespace q38 {
namespace {

// A counter-based stream per tensor: the values of a tensor depend only on the seed and its
// name, never on the order tensors are generated in.
class Stream {
 public:
  Stream(uint64_t seed, const std::string& name) : state_(seed) {
    for (unsigned char ch : name) state_ = SplitMix64(state_ ^ ch);
  }
  uint64_t Next() { return SplitMix64(state_++); }
  float Uniform() { return static_cast<float>(Next() >> 40) / static_cast<float>(1 << 24); }  // [0, 1)
  float Symmetric(float a) { return (2.0f * Uniform() - 1.0f) * a; }

 private:
  uint64_t state_;
};

class Builder {
 public:
  explicit Builder(uint64_t seed) : seed_(seed) {}

  // BF16 values uniform in center ± spread.
  void Bf16(const std::string& name, std::vector<int64_t> shape, float spread, float center = 0.0f) {
    Stream s(seed_, name);
    std::vector<float> values(Numel(shape));
    for (float& v : values) v = center + s.Symmetric(spread);
    Bf16Values(name, std::move(shape), values);
  }
  void Bf16Values(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(2 * values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t v = FloatToBf16(values[i]);
      std::memcpy(&bytes[2 * i], &v, 2);
    }
    Add(name, DType::kBF16, std::move(shape), std::move(bytes));
  }
  static int64_t Numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t seed() const { return seed_; }
  // A weight of fan-in K: spread 1/sqrt(K) keeps activations of order one.
  void Linear(const std::string& name, int64_t out, int64_t in, float gain = 1.0f) {
    Bf16(name, {out, in}, gain * std::sqrt(3.0f / static_cast<float>(in)));
  }
  void F32Scalar(const std::string& name, float v, bool as_vector) {
    std::vector<uint8_t> bytes(4);
    std::memcpy(bytes.data(), &v, 4);
    Add(name, DType::kF32, as_vector ? std::vector<int64_t>{1} : std::vector<int64_t>{}, std::move(bytes));
  }
  void I64(const std::string& name, const std::vector<int64_t>& values) {
    std::vector<uint8_t> bytes(8 * values.size());
    std::memcpy(bytes.data(), values.data(), bytes.size());
    Add(name, DType::kI64, {static_cast<int64_t>(values.size())}, std::move(bytes));
  }
  // ModelOpt NVFP4 [N, K]: random E2M1 codes, E4M3 block scales near 1, and a global chosen so
  // the dequantized weight has a spread of about 1/sqrt(K).
  void Nvfp4(const std::string& p, int64_t N, int64_t K) {
    Stream s(seed_, p);
    std::vector<uint8_t> codes(N * K / 2), scales(N * K / 16);
    for (auto& b : codes) b = static_cast<uint8_t>(s.Next() & 0xFF);
    for (auto& b : scales) b = FloatToE4m3(0.5f + 1.5f * s.Uniform());
    Add(p + "weight", DType::kU8, {N, K / 2}, std::move(codes));
    Add(p + "weight_scale", DType::kF8E4M3, {N, K / 16}, std::move(scales));
    F32Scalar(p + "weight_scale_2", 1.0f / (3.5f * std::sqrt(static_cast<float>(K))), false);
    F32Scalar(p + "input_scale", 1.0f / (6.0f * 448.0f), false);
  }
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    tensors_.push_back({name, dtype, std::move(shape), std::move(bytes)});
  }
  std::vector<TensorData> Take() { return std::move(tensors_); }

 private:
  uint64_t seed_;
  std::vector<TensorData> tensors_;
};

void AddHc(Builder& b, const ModelConfig& c, const std::string& p, bool inject) {
  const int64_t W = c.hc_width(), R = c.hc_lowrank;
  b.Bf16(p + "hc_norm.weight", {W}, 0.1f);
  b.Linear(p + "input_mix_weight_down.weight", R, W);
  b.Linear(p + "input_mix_weight_up.weight", W, R);
  if (inject) b.Linear(p + "block_inject_weight.weight", c.hc_count, W);
}

void AddGdn(Builder& b, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, C = c.gdn_conv_channels(), Dv = c.gdn_v_width(), Hv = c.gdn_value_heads;
  b.Linear(p + "in_proj_qkv.weight", C, H);
  b.Linear(p + "in_proj_z.weight", Dv, H);
  b.Linear(p + "in_proj_b.weight", Hv, H);
  b.Linear(p + "in_proj_a.weight", Hv, H);
  b.Bf16(p + "conv1d.weight", {C, 1, c.conv_kernel}, 0.5f);
  b.Bf16(p + "dt_bias", {Hv}, 0.5f);
  b.Bf16(p + "A_log", {Hv}, 1.0f, 0.5f);  // decay rates e^{A_log} between 0.6 and 4.5
  b.Bf16(p + "norm.weight", {c.gdn_value_dim}, 0.1f, 1.0f);
  b.Linear(p + "out_proj.weight", H, Dv);
}

void AddAttention(Builder& b, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, dh = c.head_dim, di = c.indexer_head_dim;
  b.Linear(p + "q_proj.weight", int64_t{c.num_heads} * 2 * dh, H);
  b.Linear(p + "k_proj.weight", int64_t{c.num_kv_heads} * dh, H);
  b.Linear(p + "v_proj.weight", int64_t{c.num_kv_heads} * dh, H);
  b.Linear(p + "o_proj.weight", H, int64_t{c.num_heads} * dh);
  b.Bf16(p + "q_norm.weight", {dh}, 0.1f);
  b.Bf16(p + "k_norm.weight", {dh}, 0.1f);
  // Each indexer query head is the key projection plus noise, so scores are mostly positive as in
  // a trained indexer: random ones leave many blocks at relu(·) = 0, whose top-k ties any
  // implementation may break its own way (docs/model.md §16.2).
  const float spread = std::sqrt(3.0f / static_cast<float>(H));
  Stream s(b.seed(), p + "indexer.index_qk_proj.weight");
  std::vector<float> key(di * H), qk;
  for (float& v : key) v = s.Symmetric(spread);
  for (int h = 0; h < c.indexer_heads; ++h) {
    for (float k : key) qk.push_back(k + 0.5f * s.Symmetric(spread));
  }
  qk.insert(qk.end(), key.begin(), key.end());
  b.Bf16Values(p + "indexer.index_qk_proj.weight", {(c.indexer_heads + 1) * di, H}, qk);
  b.Bf16(p + "indexer.q_layernorm.weight", {di}, 0.1f);
  b.Bf16(p + "indexer.k_layernorm.weight", {di}, 0.1f);
}

void AddMoe(Builder& b, const ModelConfig& c, const std::string& p, bool nvfp4) {
  const int64_t H = c.hidden_size, I = c.moe_intermediate, Is = c.shared_intermediate, E = c.num_experts;
  b.Linear(p + "gate.weight", E, H, 4.0f);  // a sharper router than uniform, as trained ones are
  b.Linear(p + "shared_expert_gate.weight", 1, H);
  b.Linear(p + "shared_expert.gate_proj.weight", Is, H);
  b.Linear(p + "shared_expert.up_proj.weight", Is, H);
  b.Linear(p + "shared_expert.down_proj.weight", H, Is);
  if (!nvfp4) {
    b.Bf16(p + "experts.gate_up_proj", {E, 2 * I, H}, std::sqrt(3.0f / H));
    b.Bf16(p + "experts.down_proj", {E, H, I}, std::sqrt(3.0f / I));
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, "experts.", e, ".");
    b.Nvfp4(ep + "gate_proj.", I, H);
    b.Nvfp4(ep + "up_proj.", I, H);
    b.Nvfp4(ep + "down_proj.", H, I);
  }
}

void AddPle(Builder& b, const ModelConfig& c, const std::string& p, bool fp8, uint64_t seed) {
  const int64_t W = c.hc_width(), H = c.hidden_size, D = c.ple_embed_dim;
  b.Linear(p + "key_proj.weight", W, D);
  b.Linear(p + "value_proj.weight", H, D);
  b.Bf16(p + "norm_key.weight", {W}, 0.1f);
  b.Bf16(p + "norm_query.weight", {W}, 0.1f);
  b.Bf16(p + "norm_conv.weight", {W}, 0.1f);
  b.Bf16(p + "conv1d.weight", {W, 1, c.ple_conv_kernel}, 0.5f);
  const PleHash hash = PleHash::Derive({c.vocab_size, c.ngram_size, c.heads_per_ngram, c.ngram_vocab_size_base,
                                        c.ngram_vocab_divisor, c.seed, 0});
  const std::string e = p + "ple_embedding.";
  b.I64(e + "layer_multipliers", hash.multipliers);
  b.I64(e + "ngram_heads_vocab_sizes", hash.head_sizes);
  b.I64(e + "ngram_heads_offsets", hash.head_offsets);
  const int64_t rows = hash.table_rows / c.split_ngram_parts, dp = c.ple_row_width();
  for (int s = 0; s < c.split_ngram_parts; ++s) {
    const std::string name = absl::StrCat(e, "ngram_embedding.shard_", s, ".weight");
    if (!fp8) {
      b.Bf16(name, {rows, dp}, 1.0f);
      continue;
    }
    Stream st(seed, name);
    std::vector<uint8_t> bytes(rows * dp);
    for (auto& v : bytes) {
      v = static_cast<uint8_t>(st.Next() & 0xFF);
      if ((v & 0x7F) == 0x7F) v ^= 1;  // E4M3 has no infinities; 0x7F and 0xFF are NaN
    }
    b.Add(name, DType::kF8E4M3, {rows, dp}, std::move(bytes));
  }
  if (fp8) {
    const uint16_t scale = FloatToBf16(1.0f / 256.0f);
    std::vector<uint8_t> bytes(2);
    std::memcpy(bytes.data(), &scale, 2);
    b.Add(e + "ngram_embedding.weight_scale", DType::kBF16, {1}, std::move(bytes));
  }
}

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for U+0100 on.
std::string ByteSymbol(int byte) {
  const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
  static const std::vector<int> shifted = [] {
    std::vector<int> v(256, -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) v[b] = next++;
    }
    return v;
  }();
  const int cp = printable ? byte : shifted[byte];
  std::string utf8;
  if (cp < 0x80) {
    utf8 += static_cast<char>(cp);
  } else {
    utf8 += static_cast<char>(0xC0 | (cp >> 6));
    utf8 += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return utf8;
}

// Qwen's pre-tokenizer split, as its tokenizer.json states it.
constexpr char kQwenSplit[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

absl::Status WriteByteTokenizer(const ModelConfig& c, const std::string& dir) {
  const int64_t first_special = c.eos_token_ids.front();
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
  if (first_special < 256 || first_special + static_cast<int64_t>(specials.size()) > c.vocab_size) {
    return absl::InvalidArgumentError("byte tokenizer: the vocabulary has no room for 256 bytes and the special tokens");
  }
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSymbol(b)] = b;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    // In the model vocabulary too: Hugging Face keeps an added token's id only for tokens it has.
    vocab[specials[i]] = first_special + static_cast<int64_t>(i);
    added.push_back({{"id", first_special + static_cast<int64_t>(i)}, {"content", specials[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  nlohmann::ordered_json tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", kQwenSplit}}}, {"behavior", "Isolated"}, {"invert", false}}, byte_level}}}},
      {"post_processor", byte_level}, {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                 {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}}}};
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/tokenizer.json", tok.dump(2) + "\n"));
  nlohmann::ordered_json config = {{"tokenizer_class", "Qwen2Tokenizer"}, {"eos_token", "<|endoftext|>"},
                                   {"pad_token", "<|endoftext|>"}, {"bos_token", nullptr}, {"model_max_length", c.max_position_embeddings}};
  return WriteFileAtomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace

absl::Status GenerateCheckpoint(const ModelConfig& c, const GeneratorOptions& o, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  const std::string P = "model.language_model.";
  Builder b(o.seed);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  b.Bf16(P + "embed_tokens.weight", {V, H}, 1.0f);
  b.Linear("lm_head.weight", V, H, 2.0f);
  AddHc(b, c, P + "hyper_connection_mixer.", false);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string lp = absl::StrCat(P, "layers.", i, ".");
    AddHc(b, c, lp + "attn_hyper_connection.", true);
    AddHc(b, c, lp + "mlp_hyper_connection.", true);
    if (c.is_attention(i)) {
      AddAttention(b, c, lp + "self_attn.");
    } else {
      AddGdn(b, c, lp + "linear_attn.");
    }
    AddMoe(b, c, lp + "mlp.", o.nvfp4_experts);
    if (c.has_ple(i)) AddPle(b, c, lp + "ple.", o.fp8_ple, o.seed);
  }
  RETURN_IF_ERROR(WriteShardedCheckpoint(dir, b.Take(), o.max_shard_bytes));

  nlohmann::ordered_json config = nlohmann::ordered_json::parse(ModelConfigJson(c));
  if (!o.fp8_ple) config["text_config"].erase("ple_embedding_dtype");
  if (o.nvfp4_experts) config["quantization_config"] = Nvfp4QuantizationConfig();
  config["q38_synthetic"] = {{"seed", o.seed}, {"generator", "q38 GenerateCheckpoint"}};
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/config.json", config.dump(2) + "\n"));
  GenerationConfig g;
  g.eos_token_ids = c.eos_token_ids;
  g.do_sample = true;
  g.temperature = 1.0;
  g.top_p = 0.95;
  g.top_k = 20;
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/generation_config.json", GenerationConfigJson(g)));
  if (o.nvfp4_experts) {
    RETURN_IF_ERROR(WriteFileAtomically(dir + "/hf_quant_config.json", Nvfp4HfQuantConfig().dump(2) + "\n"));
  }
  if (o.byte_tokenizer) RETURN_IF_ERROR(WriteByteTokenizer(c, dir));
  return absl::OkStatus();
}

}  // namespace q38
