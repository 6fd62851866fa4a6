#include "worker/checkpoint/strict_json.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace q38 {

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int len;
    uint32_t cp;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;  // a continuation byte where a lead byte belongs, or 0xF8..0xFF
    }
    if (end - p < len) return false;
    for (int i = 1; i < len; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += len;
  }
  return true;
}

absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, const std::string& context) {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(absl::StrCat(context, " is not valid UTF-8"));
  }
  // One frame per open object: the keys seen so far and the most recent one, so that a repeated
  // key can be reported with the keys of the objects that enclose it.
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> frames;
  std::string duplicate;  // first repeated key, as a path: "outer" / "inner"
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      frames.emplace_back();
    } else if (event == E::object_end) {
      if (!frames.empty()) frames.pop_back();
    } else if (event == E::key && !frames.empty() && parsed.is_string()) {
      Frame& top = frames.back();
      top.last_key = parsed.get<std::string>();
      if (!top.keys.insert(top.last_key).second && duplicate.empty()) {
        for (size_t i = 0; i + 1 < frames.size(); ++i) {
          absl::StrAppend(&duplicate, "'", frames[i].last_key, "' / ");
        }
        absl::StrAppend(&duplicate, "'", top.last_key, "'");
      }
    }
    return true;
  };
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                                  /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(context, " is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, " repeats the key ", duplicate));
  }
  return value;
}

}  // namespace q38
