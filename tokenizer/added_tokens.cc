#include "tokenizer/added_tokens.h"

#include "common/status.h"

namespace q38 {
namespace {

// HF decides these with the Rust regex crate: \w is Unicode "word" (UTS #18), \s White_Space.
const Regex& WordChar() {
  static const Regex* re =
      new Regex(*Regex::FromPcre2(R"(\A[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]\z)"));
  return *re;
}

size_t LenAt(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Start of the last character of non-empty valid UTF-8 `s`.
size_t LastCharStart(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool IsWordChar(std::string_view one_char) {
  size_t s, e;
  auto found = WordChar().Find(one_char, 0, &s, &e);
  return found.ok() && *found;
}

// The Unicode White_Space property, given as UTF-8 of one character.
bool IsWhiteSpace(std::string_view c) {
  if (c.size() == 1) {
    const char b = c[0];
    return b == ' ' || (b >= '\t' && b <= '\r');
  }
  static constexpr std::string_view kMultiByte[] = {
      "\u0085", "\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004",
      "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200A", "\u2028", "\u2029",
      "\u202F", "\u205F", "\u3000"};
  for (std::string_view w : kMultiByte) {
    if (c == w) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<AddedTokenMatcher> AddedTokenMatcher::Create(std::vector<std::string> patterns,
                                                            std::vector<const AddedToken*> tokens) {
  AddedTokenMatcher m;
  m.tokens_ = std::move(tokens);
  if (m.tokens_.empty()) return m;
  for (size_t i = 0; i < patterns.size(); ++i) {
    m.by_pattern_.emplace(patterns[i], m.tokens_[i]);  // first wins, like HF's ordering
    const AddedToken& t = *m.tokens_[i];
    m.needs_word_rules_ |= t.lstrip || t.rstrip || t.single_word;
  }
  ASSIGN_OR_RETURN(m.regex_, Regex::FromLiteralAlternatives(patterns));
  return m;
}

absl::Status AddedTokenMatcher::Split(std::string_view text, bool match_special,
                                      absl::FunctionRef<void(std::string_view)> on_text,
                                      absl::FunctionRef<void(int32_t)> on_token) const {
  return SplitWhere(text, [match_special](size_t, size_t) { return match_special; }, on_text, on_token);
}

absl::Status AddedTokenMatcher::SplitWhere(std::string_view text,
                                           absl::FunctionRef<bool(size_t begin, size_t end)> special_ok,
                                           absl::FunctionRef<void(std::string_view)> on_text,
                                           absl::FunctionRef<void(int32_t)> on_token) const {
  if (tokens_.empty() || text.empty()) {
    on_text(text);
    return absl::OkStatus();
  }
  size_t start_offset = 0;  // end of the last piece handed out
  size_t search_from = 0;   // the matcher resumes after the last match, not after its strip
  while (search_from < text.size()) {
    size_t ms, me;
    ASSIGN_OR_RETURN(const bool found, regex_.Find(text, search_from, &ms, &me));
    if (!found) break;
    search_from = me;
    const AddedToken& token = *by_pattern_.at(text.substr(ms, me - ms));
    if (token.special && !special_ok(ms, me)) continue;
    size_t start = ms, stop = me;
    if (needs_word_rules_) {
      if (token.single_word) {
        const size_t prev = start == 0 ? 0 : LastCharStart(text.substr(0, start));
        const bool space_before = start == 0 || !IsWordChar(text.substr(prev, start - prev));
        const bool space_after =
            stop == text.size() || !IsWordChar(text.substr(stop, LenAt(text, stop)));
        if (!space_before || !space_after) continue;
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          const size_t c = LastCharStart(text.substr(0, new_start));
          if (!IsWhiteSpace(text.substr(c, new_start - c))) break;
          new_start = c;
        }
        start = new_start > start_offset ? new_start : start_offset;
      }
      if (token.rstrip) {
        while (stop < text.size() && IsWhiteSpace(text.substr(stop, LenAt(text, stop)))) {
          stop += LenAt(text, stop);
        }
      }
    }
    if (start_offset < start) on_text(text.substr(start_offset, start - start_offset));
    on_token(token.id);
    start_offset = stop;
  }
  if (start_offset != text.size()) on_text(text.substr(start_offset));
  return absl::OkStatus();
}

}  // namespace q38
