// JSON parsing for checkpoint headers and indexes, stricter than nlohmann's defaults: the text must
// be valid UTF-8 and no object may repeat a key (nlohmann would silently keep one of them).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace q38 {

// True when `s` is well-formed UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s);

// Parses `text` as one JSON value. Errors are InvalidArgument with a message that starts with
// `context` (for example "safetensors file 'x': header") and says what is wrong and where.
absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, const std::string& context);

}  // namespace q38
