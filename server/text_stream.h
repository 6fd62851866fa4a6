// The text side of a generation stream: detokenizes ids as they arrive (never half a UTF-8
// character) and watches for stop strings. Text that could still turn into a stop string is held
// back until it cannot; a matched stop string ends the stream and is not part of the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tokenizer/incremental_decoder.h"

namespace q38 {

class TextStream {
 public:
  // `tokenizer` must outlive the stream; special tokens are not rendered.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops);

  struct Delta {
    std::string text;
    bool stopped = false;  // a stop string matched; `text` ends just before it
  };
  Delta Add(absl::Span<const int32_t> ids);
  // The held-back tail at the end of the stream (empty after a stop).
  std::string Finish();

 private:
  IncrementalDecoder decoder_;
  std::vector<std::string> stops_;
  size_t holdback_ = 0;  // longest stop string − 1
  std::string text_;     // everything decoded so far
  size_t sent_ = 0;      // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace q38
