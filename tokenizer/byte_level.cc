#include "tokenizer/byte_level.h"

namespace q38::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<int16_t, 512> cp_to_byte;  // all alphabet code points are below 0x144

  Tables() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      // Bytes that are printable and not whitespace in Latin-1 keep their own code point.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

inline void AppendCodepoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // the alphabet stays below U+0800
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return T().byte_to_cp[b]; }

void EncodeBytes(std::string_view bytes, std::string* out) {
  const Tables& t = T();
  for (unsigned char c : bytes) AppendCodepoint(t.byte_to_cp[c], out);
}

bool DecodeToken(std::string_view token, std::string* out) {
  const Tables& t = T();
  const size_t start = out->size();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const size_t n = token.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = ((p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
      i += 2;
    } else {
      out->resize(start);
      return false;
    }
    const int16_t b = cp < t.cp_to_byte.size() ? t.cp_to_byte[cp] : -1;
    if (b < 0) {
      out->resize(start);
      return false;
    }
    out->push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace q38::byte_level
