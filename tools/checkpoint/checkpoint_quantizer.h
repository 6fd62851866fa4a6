// Rewrites a qwen4_exp checkpoint with float experts (transformers' save_pretrained: a flat text
// config, `model.` keys, per-expert or fused BF16 experts; or the official release layout) into
// the release layout q38 and the NVFP4 releases use: outer config with text_config,
// `model.language_model.` keys, routed experts in ModelOpt NVFP4 (or the official fused BF16),
// everything else byte for byte. Tokenizer and generation config files are copied along.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace q38 {

struct QuantizeOptions {
  bool nvfp4_experts = true;  // false: fused BF16 experts (the same model, unquantized)
};

absl::Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& options);

}  // namespace q38
