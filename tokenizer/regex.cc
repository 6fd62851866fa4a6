#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tokenizer/string_view_bridge.h"

namespace q38 {

// ---------------------------------------------------------------------------------------------
// Oniguruma -> PCRE2 translation.

namespace {

// Oniguruma's \s is the Unicode White_Space property; PCRE2's UCP \s adds U+180E.
constexpr std::string_view kSpace = "\\p{White_Space}";
constexpr std::string_view kNotSpace = "\\P{White_Space}";

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
size_t Utf8Len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  absl::StatusOr<std::string> Run() {
    while (i_ < p_.size()) {
      absl::Status s = in_class_ ? ClassChar() : OuterChar();
      if (!s.ok()) return s;
    }
    if (in_class_) return Malformed("unterminated character class");
    if (!stack_.empty()) return Malformed("unbalanced '('");
    return out_;
  }

 private:
  absl::Status Unsupported(std::string_view what) const {
    return absl::UnimplementedError(absl::StrFormat(
        "regex construct %s at offset %d is not supported (pattern: %s)", what, i_, p_));
  }
  absl::Status Malformed(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed regex: %s at offset %d (pattern: %s)", what, i_, p_));
  }
  char At(size_t k) const { return k < p_.size() ? p_[k] : '\0'; }

  // An escape sequence, inside or outside a class.
  absl::Status Escape() {
    if (i_ + 1 >= p_.size()) return Malformed("trailing backslash");
    const char e = p_[i_ + 1];
    switch (e) {
      case 's': out_ += kSpace; i_ += 2; return absl::OkStatus();
      case 'S': out_ += kNotSpace; i_ += 2; return absl::OkStatus();
      case 'd': out_ += "\\p{Nd}"; i_ += 2; return absl::OkStatus();
      case 'D': out_ += "\\P{Nd}"; i_ += 2; return absl::OkStatus();
      case 'p':
      case 'P': return Property(e == 'P');
      case 'u': {  // \uHHHH
        if (i_ + 6 > p_.size()) return Malformed("short \\u escape");
        out_ += absl::StrCat("\\x{", ToAbsl(p_.substr(i_ + 2, 4)), "}");
        i_ += 6;
        return absl::OkStatus();
      }
      case 'x': {  // \xHH or \x{...}: same in both
        size_t end = i_ + 2;
        if (At(end) == '{') {
          end = p_.find('}', end);
          if (end == std::string_view::npos) return Malformed("unterminated \\x{");
          ++end;
        } else {
          while (end < p_.size() && end < i_ + 4 && std::isxdigit(static_cast<unsigned char>(p_[end]))) ++end;
        }
        out_.append(p_.substr(i_, end - i_));
        i_ = end;
        return absl::OkStatus();
      }
      case 'n': case 'r': case 't': case 'f': case 'a': case 'e':
      case 'A': case 'z': case 'Z':
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        out_.append(p_.substr(i_, 2));
        i_ += 2;
        return absl::OkStatus();
      default:
        if (std::isalnum(static_cast<unsigned char>(e)) || static_cast<unsigned char>(e) >= 0x80) {
          // \w \b \h \v \R \X \K \G \k \g ...: different or engine-specific meanings.
          return Unsupported(absl::StrCat("'\\", std::string(1, e), "'"));
        }
        out_.append(p_.substr(i_, 2));  // an escaped punctuation character is itself
        i_ += 2;
        return absl::OkStatus();
    }
  }

  // \p{Name}, \p{^Name}, \P{Name}, \pL.
  absl::Status Property(bool negated) {
    if (At(i_ + 2) != '{') {
      if (i_ + 2 >= p_.size()) return Malformed("short \\p");
      out_ += absl::StrCat(negated ? "\\P" : "\\p", ToAbsl(p_.substr(i_ + 2, 1)));
      i_ += 3;
      return absl::OkStatus();
    }
    const size_t close = p_.find('}', i_ + 3);
    if (close == std::string_view::npos) return Malformed("unterminated \\p{");
    std::string_view name = p_.substr(i_ + 3, close - i_ - 3);
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.remove_prefix(1);
    }
    out_ += absl::StrCat(negated ? "\\P{" : "\\p{", ToAbsl(name), "}");
    i_ = close + 1;
    return absl::OkStatus();
  }

  absl::Status OuterChar() {
    const char c = p_[i_];
    if (!(caseless_ && IsAsciiLetter(c))) prev_letter_ = 0;
    switch (c) {
      case '\\':
        return Escape();
      case '[':
        in_class_ = true;
        out_ += '[';
        ++i_;
        if (At(i_) == '^') { out_ += '^'; ++i_; }
        if (At(i_) == ']') { out_ += "\\]"; ++i_; }  // a leading ']' is a literal in both
        return absl::OkStatus();
      case '^':
      case '$':
        // Ruby's '^' and '$' always work per line; no tokenizer of this family uses them.
        return Unsupported(absl::StrCat("anchor '", std::string(1, c), "'"));
      case '(':
        return OpenGroup();
      case ')':
        if (stack_.empty()) return Malformed("unbalanced ')'");
        caseless_ = stack_.back();
        stack_.pop_back();
        out_ += ')';
        ++i_;
        return absl::OkStatus();
      case '{':
        // Ruby reads {,n} as {0,n}; PCRE2 10.42 would read it as literal text.
        if (At(i_ + 1) == ',' && std::isdigit(static_cast<unsigned char>(At(i_ + 2)))) {
          out_ += "{0,";
          i_ += 2;
          return absl::OkStatus();
        }
        out_ += c;
        ++i_;
        return absl::OkStatus();
      default:
        if (caseless_ && IsAsciiLetter(c)) {
          // Both engines fold case per Unicode (so 's' also matches U+017F), but Oniguruma also
          // lets a letter pair match one character that folds to it ("ss" matches U+00DF).
          const char pair[2] = {static_cast<char>(prev_letter_ | 0x20), static_cast<char>(c | 0x20)};
          const std::string_view two(pair, 2);
          if (prev_letter_ != 0 && (two == "ss" || two == "st" || two == "ff" || two == "fi" || two == "fl")) {
            return Unsupported(absl::StrCat("case-insensitive '", std::string(1, prev_letter_),
                                            std::string(1, c), "' (Oniguruma's multi-character folding)"));
          }
          out_ += c;
          ++i_;
          prev_letter_ = c;
          return absl::OkStatus();
        }
        if (caseless_ && static_cast<unsigned char>(c) >= 0x80) {
          return Unsupported("case-insensitive non-ASCII literal (Oniguruma may fold it to several characters)");
        }
        out_ += c;
        ++i_;
        return absl::OkStatus();
    }
  }

  absl::Status OpenGroup() {
    if (At(i_ + 1) != '?') {
      stack_.push_back(caseless_);
      out_ += '(';
      ++i_;
      return absl::OkStatus();
    }
    const char k = At(i_ + 2);
    if (k == 'i' || k == '-' || k == 'm' || k == 'x') {  // inline options
      size_t j = i_ + 2;
      bool on = true, caseless = caseless_;
      for (; j < p_.size() && p_[j] != ':' && p_[j] != ')'; ++j) {
        if (p_[j] == '-') on = false;
        else if (p_[j] == 'i') caseless = on;
        else return Unsupported(absl::StrCat("inline option '", std::string(1, p_[j]), "'"));
      }
      if (j >= p_.size()) return Malformed("unterminated group options");
      // PCRE2 reads the option syntax the same way; the state is tracked for the checks above.
      out_.append(p_.substr(i_, j + 1 - i_));
      if (p_[j] == ')') {  // (?i) lasts to the end of the enclosing group
        caseless_ = caseless;
      } else {
        stack_.push_back(caseless_);
        caseless_ = caseless;
      }
      i_ = j + 1;
      return absl::OkStatus();
    }
    if (k == '#') {  // comment
      const size_t close = p_.find(')', i_);
      if (close == std::string_view::npos) return Malformed("unterminated comment");
      i_ = close + 1;
      return absl::OkStatus();
    }
    if (k == ':' || k == '=' || k == '!' || k == '>' || (k == '<' && (At(i_ + 3) == '=' || At(i_ + 3) == '!'))) {
      stack_.push_back(caseless_);
      out_ += "(?";
      i_ += 2;
      return absl::OkStatus();
    }
    if (k == '<' || k == '\'') {  // named group: (?<name>...) / (?'name'...)
      stack_.push_back(caseless_);
      out_ += "(?";
      i_ += 2;
      return absl::OkStatus();
    }
    return Unsupported(absl::StrCat("group '(?", std::string(1, k), "'"));
  }

  absl::Status ClassChar() {
    const char c = p_[i_];
    if (c == '\\') return Escape();
    if (c == ']') {
      in_class_ = false;
      out_ += ']';
      ++i_;
      return absl::OkStatus();
    }
    if (c == '[') {
      if (At(i_ + 1) == ':') return Unsupported("POSIX bracket");
      return Unsupported("nested character class");
    }
    if (c == '&' && At(i_ + 1) == '&') return Unsupported("class intersection '&&'");
    if (caseless_ && static_cast<unsigned char>(c) >= 0x80) {
      return Unsupported("case-insensitive non-ASCII character in a class");
    }
    const size_t len = Utf8Len(c);
    out_.append(p_.substr(i_, len));
    i_ += len;
    return absl::OkStatus();
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string out_;
  bool in_class_ = false;
  bool caseless_ = false;
  char prev_letter_ = 0;     // the literal letter just before, inside a caseless region
  std::vector<bool> stack_;  // caseless state to restore when each open group closes
};

// Per-thread PCRE2 match state, so matching allocates nothing.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchScratch() {
    data = pcre2_match_data_create(32, nullptr);
    context = pcre2_match_context_create(nullptr);
    // The default 32 KiB JIT stack is too small for long runs of backtracking (whitespace).
    jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

std::string Pcre2Error(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

absl::StatusOr<std::string> OnigurumaToPcre2(std::string_view pattern) {
  return Translator(pattern).Run();
}

// ---------------------------------------------------------------------------------------------
// Regex.

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern, uint32_t options) {
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  // Ruby's '.' stops only at "\n".
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &err, &err_offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("regex does not compile: %s at offset %d (pattern: %s)",
                                                      Pcre2Error(err), err_offset, pattern));
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(c);
  r.pattern_ = std::string(pattern);
  return r;
}

absl::StatusOr<Regex> Regex::FromOniguruma(std::string_view pattern) {
  auto translated = OnigurumaToPcre2(pattern);
  if (!translated.ok()) return translated.status();
  return Compile(*translated, PCRE2_UTF | PCRE2_UCP);
}

absl::StatusOr<Regex> Regex::FromLiteral(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("empty literal split pattern");
  return Compile(text, PCRE2_UTF | PCRE2_LITERAL);
}

absl::StatusOr<Regex> Regex::FromPcre2(std::string_view pattern) {
  return Compile(pattern, PCRE2_UTF | PCRE2_UCP);
}

absl::StatusOr<Regex> Regex::FromLiteralAlternatives(const std::vector<std::string>& alternatives) {
  std::vector<const std::string*> sorted;
  for (const std::string& a : alternatives) {
    if (a.empty()) return absl::InvalidArgumentError("empty literal alternative");
    sorted.push_back(&a);
  }
  // Leftmost-first alternation over longest-first literals is leftmost-longest.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
  std::string pattern;
  for (const std::string* a : sorted) {
    if (!pattern.empty()) pattern += '|';
    for (unsigned char c : *a) {
      if (std::isalnum(c)) pattern += static_cast<char>(c);
      else pattern += absl::StrFormat("\\x%02x", c);
    }
  }
  return Compile(pattern, 0);
}

absl::StatusOr<bool> Regex::Find(std::string_view subject, size_t start, size_t* match_start,
                                 size_t* match_end) const {
  MatchScratch& s = Scratch();
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc;
  if (code_->jit) {
    rc = pcre2_jit_match(code_->code, subj, subject.size(), start, 0, s.data, s.context);
  } else {
    rc = pcre2_match(code_->code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, s.data, s.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("regex match failed: %s (pattern: %s)", Pcre2Error(rc), pattern_));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  *match_start = ov[0];
  *match_end = ov[1];
  return true;
}

}  // namespace q38
