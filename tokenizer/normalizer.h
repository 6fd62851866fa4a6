// Unicode NFC, the normalizer of the byte-level BPE family, computed by utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace q38 {

// Returns NFC(text) for valid UTF-8 `text`. Most text is already NFC, so only the stretches that
// could change are handed to utf8proc; when none can, the result is `text` itself and `storage`
// is untouched. Otherwise the result lives in `storage`.
std::string_view NfcNormalize(std::string_view text, std::string* storage);

}  // namespace q38
