// OpenAI's completion and chat-completion request bodies (docs/api.md) turned into the one
// request both front doors serve, q38.v1.GenerateRequest. Every field is checked: a wrong type, a
// value out of range, a setting q38 does not implement (n > 1, penalties, logit_bias) or a field
// it does not know is refused with INVALID_ARGUMENT whose message starts with the field's name
// ("temperature: ..."); another model's name is NOT_FOUND. Nothing is clamped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "q38/v1/q38.pb.h"

namespace q38::http {

enum class Endpoint { kCompletions, kChat };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  v1::GenerateRequest generate;  // max_tokens 0: chat without max_tokens (the rest of the context)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// `served_model` is the one model id this server answers to.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, Endpoint endpoint,
                                                 const std::string& served_model);

// /tokenize's body, vLLM's shape: {"prompt": text} or {"messages": [...]} (with "model" and
// "add_special_tokens", which changes nothing for Qwen, and for messages "add_generation_prompt").
absl::StatusOr<v1::GenerateRequest> ParseTokenizeRequest(const nlohmann::json& body, const std::string& served_model);
// /detokenize's {"tokens": [ids]} (with "model").
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const nlohmann::json& body, const std::string& served_model);

// The field an INVALID_ARGUMENT from ParseOpenAiRequest or from the shared validation
// (server/validation.h, which names q38.v1 fields) is about, by OpenAI's name: "temperature",
// "messages[1].content", "prompt"; empty when the message names none.
std::string OpenAiParam(const absl::Status& error, Endpoint endpoint);

}  // namespace q38::http
