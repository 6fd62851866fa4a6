// The benchmark's fixed prompt (docs/contract.md §5.1): a fixed sentence tokenized without
// special tokens, repeated and cut to exactly L tokens, identified by the SHA-256 of its ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace q38 {

inline constexpr char kFixedPromptSentence[] =
    "This fixed benchmark prompt is used to create a deterministic tokenized input for single-request "
    "decode measurement. ";

// The sentence's ids (no special tokens matched or added) repeated ⌈L/len⌉ times, truncated to L.
absl::StatusOr<std::vector<int32_t>> FixedPrompt(const Tokenizer& tokenizer, const std::string& sentence, int64_t length);

// SHA-256 (hex) over the comma-joined decimal ids: how prompts and outputs are identified.
std::string HashIds(absl::Span<const int32_t> ids);

}  // namespace q38
