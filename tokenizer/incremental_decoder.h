// Streaming detokenization: text deltas as ids arrive, never half a UTF-8 character.
//
// The concatenation of all deltas and Finish() equals Tokenizer::Decode of all ids: a character
// split across tokens comes out once its last byte arrives, and invalid bytes become U+FFFD just
// as Decode would replace them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace q38 {

class IncrementalDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit IncrementalDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(&tokenizer), options_(options) {}

  // Returns the text completed by `id` (often empty for partial characters).
  std::string Add(int32_t id);
  std::string Add(absl::Span<const int32_t> ids);
  // At the end of the stream: emits a held incomplete character as U+FFFD, and resets.
  std::string Finish();
  // True while bytes of an incomplete character are held back.
  bool has_pending() const { return stream_.has_pending(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  utf8::LossyStream stream_;
  std::string bytes_;  // scratch
};

}  // namespace q38
