// The ModelOpt NVFP4 descriptions that accompany NVFP4 experts in a checkpoint (docs/model.md §14.3):
// config.json's quantization_config and hf_quant_config.json, as the RadixArk release has them.
#pragma once

#include "nlohmann/json.hpp"

namespace q38 {

nlohmann::ordered_json Nvfp4QuantizationConfig();
nlohmann::ordered_json Nvfp4HfQuantConfig();

}  // namespace q38
