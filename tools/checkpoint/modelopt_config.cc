#include "tools/checkpoint/modelopt_config.h"

namespace q38 {

nlohmann::ordered_json Nvfp4QuantizationConfig() {
  return {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"config_groups",
           {{"group_0",
             {{"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
              {"input_activations", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
              {"targets", {"Linear"}}}}}},
          {"ignore",
           {"model.embed_tokens", "mtp.*", "model.mtp.*", "*.self_attn.*", "*.linear_attn.*", "*.mlp.gate*",
            "*.mlp.shared_expert.*", "*hyper_connection*", "*.ple.*", "lm_head"}}};
}

nlohmann::ordered_json Nvfp4HfQuantConfig() {
  return {{"producer", {{"name", "modelopt"}}},
          {"quantization",
           {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"kv_cache_quant_algo", nullptr},
            {"exclude_modules", Nvfp4QuantizationConfig()["ignore"]}}}};
}

}  // namespace q38
