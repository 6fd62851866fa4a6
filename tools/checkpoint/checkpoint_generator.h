// Writes a random qwen4_exp checkpoint in exactly the layout of the published NVFP4 release
// (docs/model.md §2, §14): config.json with text_config and quantization_config,
// generation_config.json, hf_quant_config.json, BF16 backbone, per-expert ModelOpt NVFP4 experts
// (or the official fused BF16 experts), FP8 (or BF16) PLE shards with their scale, and the int64
// hash buffers. Deterministic byte for byte from the seed; every file is marked synthetic.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/config.h"

namespace q38 {

struct GeneratorOptions {
  uint64_t seed = 0;
  bool nvfp4_experts = true;  // false: the official release's fused BF16 experts
  bool fp8_ple = true;        // false: a BF16 n-gram table
  size_t max_shard_bytes = size_t{1} << 30;
  // Also write a byte-level BPE tokenizer of the Qwen family (no merges: one token per byte,
  // ids 0-255, Qwen's special tokens from the config's EOS id on), so text can flow end to end.
  bool byte_tokenizer = true;
};

absl::Status GenerateCheckpoint(const ModelConfig& config, const GeneratorOptions& options, const std::string& dir);

}  // namespace q38
