// q38-quantize: a float-expert qwen4_exp checkpoint → the release layout with NVFP4 experts.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/checkpoint/checkpoint_quantizer.h"

ABSL_FLAG(std::string, in, "", "checkpoint directory with float (BF16/F16/F32) experts");
ABSL_FLAG(std::string, out, "", "directory to write the release-layout checkpoint to");
ABSL_FLAG(bool, bf16_experts, false, "keep the experts in BF16 (fused, as the official release) instead of NVFP4");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Quantizes a checkpoint's experts to ModelOpt NVFP4: q38-quantize --in DIR --out DIR");
  absl::ParseCommandLine(argc, argv);
  const std::string in = absl::GetFlag(FLAGS_in), out = absl::GetFlag(FLAGS_out);
  if (in.empty() || out.empty()) {
    std::cerr << "q38-quantize: --in and --out are required\n";
    return 2;
  }
  q38::QuantizeOptions options;
  options.nvfp4_experts = !absl::GetFlag(FLAGS_bf16_experts);
  if (absl::Status s = q38::QuantizeCheckpoint(in, out, options); !s.ok()) {
    std::cerr << "q38-quantize: " << s << "\n";
    return 1;
  }
  std::cout << "wrote " << out << " (experts " << (options.nvfp4_experts ? "NVFP4" : "BF16") << ")\n";
  return 0;
}
