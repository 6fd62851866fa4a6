// The pre-tokenizer: cuts normalized text into the pieces BPE encodes one at a time.
//
// Supports what the byte-level BPE family uses: any number of `Split` steps (regex or literal
// pattern, all five delimiter behaviours, invert) followed by one `ByteLevel` step
// (add_prefix_space, use_regex with the GPT-2 pattern).
#pragma once

#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/regex.h"

namespace q38 {

// HF's SplitDelimiterBehavior: what happens to the matched delimiters.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

struct SplitStep {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct ByteLevelStep {
  bool add_prefix_space = false;
  bool use_regex = true;
};

class PreTokenizer {
 public:
  static absl::StatusOr<PreTokenizer> Create(std::vector<SplitStep> splits, ByteLevelStep byte_level);

  PreTokenizer() = default;

  // Calls `sink` with every non-empty piece of `text` (valid UTF-8), in order.
  absl::Status Split(std::string_view text, absl::FunctionRef<void(std::string_view)> sink) const;

 private:
  absl::Status RunSplit(size_t step, std::string_view text,
                        absl::FunctionRef<void(std::string_view)> sink) const;
  absl::Status RunByteLevel(std::string_view text, absl::FunctionRef<void(std::string_view)> sink) const;

  std::vector<SplitStep> splits_;
  ByteLevelStep byte_level_;
  Regex gpt2_;  // the ByteLevel regex, when use_regex
};

}  // namespace q38
