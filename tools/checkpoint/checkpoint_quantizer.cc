#include "tools/checkpoint/checkpoint_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/modelopt_config.h"
#include "tools/checkpoint/nvfp4_quantize.h"
#include "worker/checkpoint/safetensors_writer.h"
#include "worker/checkpoint/tensor_store.h"

namespace q38 {
namespace {

using json = nlohmann::ordered_json;

const char kReleasePrefix[] = "model.language_model.";

// The outer qwen4_exp config; a flat text config (save_pretrained of the text model) is wrapped.
absl::StatusOr<json> OuterConfig(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: not a JSON object"));
  if (j.value("model_type", "") == "qwen4_exp") return j;
  if (j.value("model_type", "") != "qwen4_exp_text") {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: model_type is neither qwen4_exp nor qwen4_exp_text"));
  }
  for (const char* k : {"architectures", "transformers_version", "quantization_config"}) j.erase(k);
  return json{{"architectures", {"Qwen4ExpForConditionalGeneration"}}, {"model_type", "qwen4_exp"}, {"text_config", j}};
}

absl::StatusOr<std::vector<float>> ToFloat(const TensorView& v) {
  std::vector<float> out(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) {
    switch (v.dtype) {
      case DType::kBF16:
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, v.data + 2 * i, 2);
        out[i] = v.dtype == DType::kBF16 ? Bf16ToFloat(h) : Fp16ToFloat(h);
        break;
      }
      case DType::kF32:
        std::memcpy(&out[i], v.data + 4 * i, 4);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(v.name, ": experts must be BF16, F16 or F32, got ", std::string(DTypeName(v.dtype))));
    }
  }
  return out;
}

// One layer's experts as float: gate and up [E][I·H] each, down [E][H·I]. Accepts the fused
// official tensors or transformers' per-expert ones.
struct FloatExperts {
  std::vector<std::vector<float>> gate, up, down;
};

absl::StatusOr<std::vector<float>> Get(const TensorStore& store, const std::string& name, std::vector<int64_t> shape) {
  const TensorView* v = store.Find(name);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("checkpoint: missing tensor ", name));
  if (v->shape != shape) return absl::InvalidArgumentError(absl::StrCat(name, ": unexpected shape"));
  return ToFloat(*v);
}

absl::StatusOr<FloatExperts> ReadExperts(const TensorStore& store, const ModelConfig& c, const std::string& p) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate;
  FloatExperts x;
  x.gate.resize(E);
  x.up.resize(E);
  x.down.resize(E);
  if (store.Find(p + "gate_up_proj") != nullptr) {
    ASSIGN_OR_RETURN(std::vector<float> gu, Get(store, p + "gate_up_proj", {E, 2 * I, H}));
    ASSIGN_OR_RETURN(std::vector<float> d, Get(store, p + "down_proj", {E, H, I}));
    for (int64_t e = 0; e < E; ++e) {
      const float* g = gu.data() + e * 2 * I * H;
      x.gate[e].assign(g, g + I * H);
      x.up[e].assign(g + I * H, g + 2 * I * H);
      x.down[e].assign(d.data() + e * H * I, d.data() + (e + 1) * H * I);
    }
    return x;
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, e, ".");
    ASSIGN_OR_RETURN(x.gate[e], Get(store, ep + "gate_proj.weight", {I, H}));
    ASSIGN_OR_RETURN(x.up[e], Get(store, ep + "up_proj.weight", {I, H}));
    ASSIGN_OR_RETURN(x.down[e], Get(store, ep + "down_proj.weight", {H, I}));
  }
  return x;
}

std::vector<uint8_t> Bf16Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = FloatToBf16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

TensorData F32Scalar(std::string name, float v) {
  std::vector<uint8_t> bytes(4);
  std::memcpy(bytes.data(), &v, 4);
  return {std::move(name), DType::kF32, {}, std::move(bytes)};
}

float Amax(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

void AddNvfp4(std::vector<TensorData>& out, const std::string& p, const std::vector<float>& w, int64_t N, int64_t K,
              float global) {
  Nvfp4Weight q = QuantizeNvfp4(w.data(), N, K, global);
  out.push_back({p + "weight", DType::kU8, {N, K / 2}, std::move(q.codes)});
  out.push_back({p + "weight_scale", DType::kF8E4M3, {N, K / 16}, std::move(q.scales)});
  out.push_back(F32Scalar(p + "weight_scale_2", global));
  // Not calibrated (there are no activations here): W4A16 runtimes, q38 and the HF reference
  // included, never read it; this value assumes activations of magnitude 1.
  out.push_back(F32Scalar(p + "input_scale", Nvfp4Global(1.0f)));
}

void AddExperts(std::vector<TensorData>& out, const ModelConfig& c, const std::string& p, const FloatExperts& x,
                bool nvfp4) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate;
  if (!nvfp4) {
    std::vector<float> gu, d;
    for (int64_t e = 0; e < E; ++e) {
      gu.insert(gu.end(), x.gate[e].begin(), x.gate[e].end());
      gu.insert(gu.end(), x.up[e].begin(), x.up[e].end());
      d.insert(d.end(), x.down[e].begin(), x.down[e].end());
    }
    out.push_back({p + "gate_up_proj", DType::kBF16, {E, 2 * I, H}, Bf16Bytes(gu)});
    out.push_back({p + "down_proj", DType::kBF16, {E, H, I}, Bf16Bytes(d)});
    return;
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, e, ".");
    // Gate and up share one global, as ModelOpt exports do (runtimes fuse them into one GEMM).
    const float g13 = Nvfp4Global(std::max(Amax(x.gate[e]), Amax(x.up[e])));
    AddNvfp4(out, ep + "gate_proj.", x.gate[e], I, H, g13);
    AddNvfp4(out, ep + "up_proj.", x.up[e], I, H, g13);
    AddNvfp4(out, ep + "down_proj.", x.down[e], H, I, Nvfp4Global(Amax(x.down[e])));
  }
}

absl::Status CopyIfPresent(const std::string& from_dir, const std::string& to_dir, const std::string& name) {
  if (!std::filesystem::exists(from_dir + "/" + name)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, ReadFile(from_dir + "/" + name));
  return WriteFileAtomically(to_dir + "/" + name, text);
}

}  // namespace

absl::Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o) {
  ASSIGN_OR_RETURN(json config, OuterConfig(in_dir));
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(config.dump()));
  ASSIGN_OR_RETURN(std::unique_ptr<TensorStore> store, TensorStore::Open(in_dir));
  const std::string in_prefix = store->Find(std::string(kReleasePrefix) + "embed_tokens.weight") ? kReleasePrefix : "model.";
  std::vector<TensorData> out;
  for (const std::string& name : store->Names()) {
    if (absl::StrContains(name, ".mlp.experts.")) continue;  // rewritten per layer below
    if (absl::StartsWith(name, "mtp.") || absl::StartsWith(name, "model.mtp.") || absl::StartsWith(name, "model.visual.")) {
      continue;  // out of scope for the text model, as for HF's loader
    }
    const TensorView& v = *store->Find(name);
    const std::string renamed =
        absl::StartsWith(name, in_prefix) ? absl::StrCat(kReleasePrefix, name.substr(in_prefix.size())) : name;
    out.push_back({renamed, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)});
  }
  for (int i = 0; i < c.num_layers; ++i) {
    ASSIGN_OR_RETURN(FloatExperts x, ReadExperts(*store, c, absl::StrCat(in_prefix, "layers.", i, ".mlp.experts.")));
    AddExperts(out, c, absl::StrCat(kReleasePrefix, "layers.", i, ".mlp.experts."), x, o.nvfp4_experts);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir, ": ", ec.message()));
  RETURN_IF_ERROR(WriteShardedCheckpoint(out_dir, std::move(out), size_t{1} << 30));
  if (o.nvfp4_experts) {
    config["quantization_config"] = Nvfp4QuantizationConfig();
    RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/hf_quant_config.json", Nvfp4HfQuantConfig().dump(2) + "\n"));
  } else {
    config.erase("quantization_config");
  }
  RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/config.json", config.dump(2) + "\n"));
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    RETURN_IF_ERROR(CopyIfPresent(in_dir, out_dir, f));
  }
  return absl::OkStatus();
}

}  // namespace q38
