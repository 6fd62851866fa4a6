#include "tokenizer/pretokenizer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "tokenizer/string_view_bridge.h"

namespace q38 {
namespace {

// The pattern HF's ByteLevel pre-tokenizer uses when use_regex is set (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

size_t CharLen(std::string_view text, size_t at) {
  if (at >= text.size()) return 1;
  const auto b = static_cast<unsigned char>(text[at]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Folds the stream of (segment, is_match) pairs into the pieces a delimiter behaviour keeps,
// one segment at a time, in the same way HF folds the whole list.
class BehaviorFold {
 public:
  BehaviorFold(SplitBehavior behavior, absl::FunctionRef<void(size_t, size_t)> emit)
      : behavior_(behavior), emit_(emit) {}

  void Add(size_t s, size_t e, bool is_match) {
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        Emit(s, e);
        return;
      case SplitBehavior::kRemoved:
        if (!is_match) Emit(s, e);
        return;
      case SplitBehavior::kContiguous:
        // Runs of segments with the same is_match become one piece.
        if (has_pending_ && is_match == prev_match_) {
          pend_e_ = e;
        } else {
          Replace(s, e);
        }
        prev_match_ = is_match;
        return;
      case SplitBehavior::kMergedWithPrevious:
        // A delimiter joins the piece before it, unless that piece ended in a delimiter.
        if (has_pending_ && is_match && !prev_match_) {
          pend_e_ = e;
        } else {
          Replace(s, e);
        }
        prev_match_ = is_match;
        return;
      case SplitBehavior::kMergedWithNext:
        // A delimiter joins the piece after it, unless that piece is a delimiter too.
        if (has_pending_ && pend_mergeable_ && !is_match) {
          pend_e_ = e;
          pend_mergeable_ = false;
        } else {
          Replace(s, e);
          pend_mergeable_ = is_match;
        }
        return;
    }
  }

  void Finish() {
    if (has_pending_) Emit(pend_s_, pend_e_);
    has_pending_ = false;
  }

 private:
  void Emit(size_t s, size_t e) {
    if (s != e) emit_(s, e);  // HF drops empty splits
  }
  void Replace(size_t s, size_t e) {
    if (has_pending_) Emit(pend_s_, pend_e_);
    has_pending_ = true;
    pend_s_ = s;
    pend_e_ = e;
  }

  SplitBehavior behavior_;
  absl::FunctionRef<void(size_t, size_t)> emit_;
  bool has_pending_ = false;
  size_t pend_s_ = 0, pend_e_ = 0;
  bool prev_match_ = false;
  bool pend_mergeable_ = false;
};

// Calls f(start, end, is_match) for the matches of `re` in `text` and the gaps between them, as
// HF's Pattern::find_matches does with Oniguruma's find_iter.
template <class F>
absl::Status ForEachSegment(const Regex& re, std::string_view text, F&& f) {
  size_t prev = 0;
  size_t search_from = 0;
  bool has_last = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    size_t s, e;
    ASSIGN_OR_RETURN(const bool found, re.Find(text, search_from, &s, &e));
    if (!found) break;
    if (s == e && has_last && last_match_end == e) {
      // An empty match right after the previous one is skipped, one character further on.
      search_from += CharLen(text, search_from);
      continue;
    }
    search_from = e;
    last_match_end = e;
    has_last = true;
    if (prev != s) f(prev, s, false);
    f(s, e, true);
    prev = e;
  }
  if (prev != text.size()) f(prev, text.size(), false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::UnimplementedError(absl::StrCat("unsupported Split behavior '", ToAbsl(name), "'"));
}

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::vector<SplitStep> splits,
                                                  ByteLevelStep byte_level) {
  PreTokenizer p;
  p.splits_ = std::move(splits);
  p.byte_level_ = byte_level;
  if (byte_level.use_regex) {
    ASSIGN_OR_RETURN(p.gpt2_, Regex::FromOniguruma(kGpt2Pattern));
  }
  return p;
}

absl::Status PreTokenizer::Split(std::string_view text,
                                 absl::FunctionRef<void(std::string_view)> sink) const {
  return RunSplit(0, text, sink);
}

absl::Status PreTokenizer::RunSplit(size_t step, std::string_view text,
                                    absl::FunctionRef<void(std::string_view)> sink) const {
  if (text.empty()) return absl::OkStatus();
  if (step == splits_.size()) return RunByteLevel(text, sink);
  const SplitStep& split = splits_[step];
  absl::Status inner = absl::OkStatus();
  auto emit = [&](size_t s, size_t e) {
    if (inner.ok()) inner = RunSplit(step + 1, text.substr(s, e - s), sink);
  };
  BehaviorFold fold(split.behavior, emit);
  RETURN_IF_ERROR(ForEachSegment(split.regex, text, [&](size_t s, size_t e, bool is_match) {
    fold.Add(s, e, is_match != split.invert);
  }));
  fold.Finish();
  return inner;
}

absl::Status PreTokenizer::RunByteLevel(std::string_view text,
                                        absl::FunctionRef<void(std::string_view)> sink) const {
  std::string prefixed;
  if (byte_level_.add_prefix_space && text[0] != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  if (!byte_level_.use_regex) {
    sink(text);
    return absl::OkStatus();
  }
  return ForEachSegment(gpt2_, text, [&](size_t s, size_t e, bool) {
    if (s != e) sink(text.substr(s, e - s));
  });
}

}  // namespace q38
