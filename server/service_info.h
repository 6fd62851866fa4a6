// What the front doors (gRPC service.h, HTTP http/) know of the served model and its group.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "nlohmann/json.hpp"
#include "q38/v1/q38.pb.h"
#include "server/validation.h"
#include "tokenizer/tokenizer.h"

namespace q38 {

struct ServiceInfo {
  v1::Info info;
  v1::Manifest manifest;
  ModelLimits limits;
  std::vector<int32_t> eos_ids;  // generation_config's stop set
  const Tokenizer* tokenizer = nullptr;  // the checkpoint's; null when it ships none
  GenerationConfig generation;           // the benchmark's health checks sample with it
  // --chat_special_tokens_in_content: special tokens typed in chat messages become control tokens
  // (the behaviour of transformers' apply_chat_template; off: only the template's markers do).
  bool chat_special_tokens_in_content = false;
  nlohmann::json build;                  // the bundle's build manifest; null without a bundle
  // Gathers the worker manifests again and checks them (group, bundle): the benchmark's second look.
  std::function<absl::StatusOr<v1::Manifest>()> refresh_manifest;
};

}  // namespace q38
