#include "tools/checkpoint/checkpoint_generator.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/splitmix64.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/modelopt_config.h"
#include "worker/checkpoint/safetensors_writer.h"
#include "worker/model/tensor_schema.h"

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

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Floating-point values in the spec's first dtype.
std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(DTypeSize(dtype) * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kBF16) {
      const uint16_t v = FloatToBf16(values[i]);
      std::memcpy(&bytes[2 * i], &v, 2);
    } else {
      std::memcpy(&bytes[4 * i], &values[i], 4);
    }
  }
  return bytes;
}

// The bytes of one tensor as the schema says to draw them. An NVFP4 projection's codes and its
// block scales come from one stream, named for the projection: `nvfp4` carries it from the one
// to the other, which the schema lists next.
std::vector<uint8_t> DrawBytes(const TensorSpec& t, uint64_t seed, std::optional<Stream>& nvfp4) {
  const DType dtype = t.dtypes.front();
  const int64_t n = Numel(t.shape);
  switch (t.draw) {
    case Draw::kUniform: {
      Stream s(seed, t.name);
      std::vector<float> values(n);
      for (float& v : values) v = t.center + s.Symmetric(t.spread);
      return Encode(dtype, values);
    }
    case Draw::kIndexerQk: {
      Stream s(seed, t.name);
      std::vector<float> key(t.head_rows * t.shape[1]), qk;
      for (float& v : key) v = s.Symmetric(t.spread);
      for (int64_t h = 0; h + 1 < t.shape[0] / t.head_rows; ++h) {
        for (float k : key) qk.push_back(k + 0.5f * s.Symmetric(t.spread));
      }
      qk.insert(qk.end(), key.begin(), key.end());
      return Encode(dtype, qk);
    }
    case Draw::kNvfp4Codes: {
      nvfp4.emplace(seed, t.name.substr(0, t.name.size() - std::string("weight").size()));
      std::vector<uint8_t> codes(n);
      for (auto& b : codes) b = static_cast<uint8_t>(nvfp4->Next() & 0xFF);
      return codes;
    }
    case Draw::kNvfp4Scales: {
      std::vector<uint8_t> scales(n);
      for (auto& b : scales) b = FloatToE4m3(0.5f + 1.5f * nvfp4->Uniform());
      return scales;
    }
    case Draw::kConstant:
      return Encode(dtype, std::vector<float>(std::max<int64_t>(n, 1), t.center));
    case Draw::kValues: {
      std::vector<uint8_t> bytes(8 * t.values.size());
      std::memcpy(bytes.data(), t.values.data(), bytes.size());
      return bytes;
    }
    case Draw::kFp8Bytes: {
      Stream s(seed, t.name);
      std::vector<uint8_t> bytes(n);
      for (auto& v : bytes) {
        v = static_cast<uint8_t>(s.Next() & 0xFF);
        if ((v & 0x7F) == 0x7F) v ^= 1;  // E4M3 has no infinities; 0x7F and 0xFF are NaN
      }
      return bytes;
    }
  }
  return {};
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
  const TensorSchema schema(c, {.nvfp4_experts = o.nvfp4_experts, .fp8_ple = o.fp8_ple});
  std::vector<TensorData> tensors;
  std::optional<Stream> nvfp4;
  for (const TensorSpec& t : schema.tensors()) tensors.push_back({t.name, t.dtypes.front(), t.shape, DrawBytes(t, o.seed, nvfp4)});
  RETURN_IF_ERROR(WriteShardedCheckpoint(dir, std::move(tensors), o.max_shard_bytes));

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
