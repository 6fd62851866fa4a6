// Request validation at the API edge: every field a client sets is checked before admission, and
// each error names the field (docs/design.md §9: a precise error, never a crash or a silent clamp).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "q38/v1/q38.pb.h"

namespace q38 {

// The most log-probability alternatives a request may ask for (the workers' bound, OpenAI's too).
inline constexpr int32_t kMaxLogprobs = 20;

struct ModelLimits {
  int64_t vocab_size = 0;
  int64_t max_context = 0;
};

// Fields of the request unknown to this server (sent by a newer client), as "field N" names.
absl::Status RejectUnknownFields(const google::protobuf::Message& message);

// Everything but the input's tokenization: sampling, max_tokens, stop ids.
absl::Status ValidateGenerate(const v1::GenerateRequest& request, const ModelLimits& limits);

// The prompt once tokenized: non-empty, ids in the vocabulary, prompt + max_tokens within context.
absl::Status ValidatePrompt(const std::vector<int32_t>& prompt, int32_t max_tokens, const ModelLimits& limits);

}  // namespace q38
