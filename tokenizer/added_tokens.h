// Added tokens (special and not): found in the text before the model sees it, as HF's
// AddedVocabulary does, with its lstrip / rstrip / single_word / normalized rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tokenizer/string_view_bridge.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/regex.h"

namespace q38 {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// Finds one class of added tokens (those matched on raw text, or those matched on normalized
// text) in a string.
class AddedTokenMatcher {
 public:
  // `patterns[i]` is what to look for (the content, normalized for normalized tokens) and
  // `tokens[i]` the token it stands for.
  static absl::StatusOr<AddedTokenMatcher> Create(std::vector<std::string> patterns,
                                                  std::vector<const AddedToken*> tokens);
  AddedTokenMatcher() = default;

  // Cuts `text` into text pieces (on_text) and added tokens (on_token), in order. With
  // `match_special` false, special tokens are left in the text (HF's encode_special_tokens).
  absl::Status Split(std::string_view text, bool match_special,
                     absl::FunctionRef<void(std::string_view)> on_text,
                     absl::FunctionRef<void(int32_t)> on_token) const;
  // The same, taking a special token found at bytes [begin, end) of `text` only when
  // special_ok(begin, end) (chat: only in the template's own text).
  absl::Status SplitWhere(std::string_view text, absl::FunctionRef<bool(size_t begin, size_t end)> special_ok,
                          absl::FunctionRef<void(std::string_view)> on_text,
                          absl::FunctionRef<void(int32_t)> on_token) const;

  bool empty() const { return tokens_.empty(); }

 private:
  Regex regex_;
  StringMap<const AddedToken*> by_pattern_;
  std::vector<const AddedToken*> tokens_;
  bool needs_word_rules_ = false;  // some token has lstrip / rstrip / single_word
};

}  // namespace q38
