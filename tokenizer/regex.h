// PCRE2 (UTF + UCP + JIT) patterns with the meaning Hugging Face tokenizers give them.
//
// HF compiles tokenizer regexes with Oniguruma (Ruby syntax). PCRE2 reads most of that syntax the
// same way, but \s, \w, \h, \v and {,n} differ, so patterns are translated first; what
// cannot be carried over exactly (line anchors, multi-character case folding) is refused.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace q38 {

// Translates an Oniguruma (Ruby syntax) pattern into an equivalent PCRE2 pattern.
absl::StatusOr<std::string> OnigurumaToPcre2(std::string_view pattern);

// A compiled pattern; immutable, cheap to copy, and safe to use from several threads.
class Regex {
 public:
  // An Oniguruma pattern as found in tokenizer.json ("Regex" patterns).
  static absl::StatusOr<Regex> FromOniguruma(std::string_view pattern);
  // Matches `text` literally ("String" patterns).
  static absl::StatusOr<Regex> FromLiteral(std::string_view text);
  // Matches any of `alternatives` byte-wise, leftmost and then longest (like Aho-Corasick's
  // LeftmostLongest). Needs no UTF-8 awareness: valid UTF-8 literals only match at character
  // boundaries of valid UTF-8 text.
  static absl::StatusOr<Regex> FromLiteralAlternatives(const std::vector<std::string>& alternatives);
  // A PCRE2 pattern compiled in UTF + UCP mode, as is.
  static absl::StatusOr<Regex> FromPcre2(std::string_view pattern);

  Regex() = default;

  // Finds the leftmost match in `subject` starting at or after byte `start`. Returns 1 and sets
  // [*match_start, *match_end) on a match, 0 when there is none. Subjects of UTF patterns must
  // be valid UTF-8 (not checked again here). Errors (e.g. the match limit) come back as status.
  absl::StatusOr<bool> Find(std::string_view subject, size_t start, size_t* match_start,
                            size_t* match_end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  static absl::StatusOr<Regex> Compile(std::string_view pattern, uint32_t options);

  std::shared_ptr<const Code> code_;
  std::string pattern_;  // as given to PCRE2, for messages
};

}  // namespace q38
