#include "tokenizer/fixed_prompt.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"

namespace q38 {

absl::StatusOr<std::vector<int32_t>> FixedPrompt(const Tokenizer& tokenizer, const std::string& sentence, int64_t length) {
  if (length <= 0) return absl::InvalidArgumentError(absl::StrCat("prompt length must be positive, got ", length));
  absl::StatusOr<std::vector<int32_t>> unit = tokenizer.Encode(sentence, {.match_special_tokens = false});
  if (!unit.ok()) return unit.status();
  if (unit->empty()) return absl::InvalidArgumentError("the prompt sentence encodes to no tokens");
  std::vector<int32_t> ids;
  ids.reserve(length);
  while (static_cast<int64_t>(ids.size()) < length) {
    for (int32_t id : *unit) {
      if (static_cast<int64_t>(ids.size()) == length) break;
      ids.push_back(id);
    }
  }
  return ids;
}

std::string HashIds(absl::Span<const int32_t> ids) { return Sha256Hex(absl::StrJoin(ids, ",")); }

}  // namespace q38
