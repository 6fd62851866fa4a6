// q38-make-checkpoint: writes a random qwen4_exp checkpoint in the release layout.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/checkpoint/checkpoint_generator.h"

ABSL_FLAG(std::string, out, "", "directory to write the checkpoint to");
ABSL_FLAG(std::string, size, "tiny", "geometry: tiny (tests and demo) or release (Qwen3.8-Flash-Next shapes)");
ABSL_FLAG(uint64_t, seed, 0, "random seed; the same seed writes the same bytes");
ABSL_FLAG(bool, bf16_experts, false, "write the official release's fused BF16 experts instead of NVFP4");
ABSL_FLAG(bool, bf16_ple, false, "write a BF16 n-gram table instead of FP8");
ABSL_FLAG(int32_t, indexer_budget, 0, "override the QSA budget in tokens (0 keeps the geometry's)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes a random qwen4_exp checkpoint: q38-make-checkpoint --out DIR [--size tiny]");
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out), size = absl::GetFlag(FLAGS_size);
  if (out.empty()) {
    std::cerr << "q38-make-checkpoint: --out is required\n";
    return 2;
  }
  q38::ModelConfig config;
  if (size == "tiny") {
    config = q38::TinyModelConfig();
  } else if (size == "release") {
    config = q38::ReleaseModelConfig();
  } else {
    std::cerr << "q38-make-checkpoint: --size must be tiny or release, got " << size << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_indexer_budget) > 0) config.indexer_budget = absl::GetFlag(FLAGS_indexer_budget);
  q38::GeneratorOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.nvfp4_experts = !absl::GetFlag(FLAGS_bf16_experts);
  options.fp8_ple = !absl::GetFlag(FLAGS_bf16_ple);
  options.byte_tokenizer = size == "tiny";  // the release's own tokenizer has 248k tokens
  if (absl::Status s = q38::GenerateCheckpoint(config, options, out); !s.ok()) {
    std::cerr << "q38-make-checkpoint: " << s << "\n";
    return 1;
  }
  std::cout << "wrote " << size << " checkpoint (seed " << options.seed << ") to " << out << "\n";
  return 0;
}
