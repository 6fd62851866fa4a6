// UTF-8 validation and lossy decoding.
//
// Decoding must reproduce Rust's String::from_utf8_lossy byte for byte, because that is what the
// Hugging Face ByteLevel decoder applies to the concatenated token bytes: each maximal invalid
// subpart (Unicode 15, §3.9 "U+FFFD substitution of maximal subparts") becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace q38::utf8 {

inline constexpr size_t kValid = static_cast<size_t>(-1);

// Byte offset of the first invalid or truncated sequence in `text`, or kValid.
size_t FindInvalid(std::string_view text);

// Appends `bytes` to `out`, replacing invalid sequences by U+FFFD.
void AppendLossy(std::string_view bytes, std::string* out);

// AppendLossy for a byte stream that arrives in pieces: a character split across pieces is held
// back until it is complete, so the concatenation of all outputs plus Finish() equals
// AppendLossy of the concatenated input.
class LossyStream {
 public:
  void Append(std::string_view bytes, std::string* out);
  // Emits what is still held (an incomplete character becomes one U+FFFD) and resets.
  void Finish(std::string* out);
  bool has_pending() const { return pending_len_ != 0; }

 private:
  char pending_[4] = {};
  size_t pending_len_ = 0;
};

}  // namespace q38::utf8
