#include "tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace q38::utf8 {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// Looks at the sequence starting at p[0] (n >= 1 bytes available). Returns its length when it is a
// complete valid character. Otherwise returns -k, where k >= 1 is the length of the maximal
// subpart to replace; *truncated tells whether those k bytes are a valid prefix cut short by the
// end of the input (the only case a stream must hold back).
inline int Scan(const uint8_t* p, size_t n, bool* truncated) {
  *truncated = false;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;       // no overlongs
    else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;       // no overlongs
    else if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) {
      *truncated = true;
      return -i;
    }
    if (p[i] < lo || p[i] > hi) return -i;
    lo = 0x80;
    hi = 0xBF;
  }
  return len;
}

// Length of the leading all-ASCII run, eight bytes at a time.
inline size_t AsciiPrefix(const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

// Decodes p[0..n) into out; returns the number of bytes consumed. With `hold_truncated`, a
// truncated final character is left unconsumed.
size_t Decode(const uint8_t* p, size_t n, bool hold_truncated, std::string* out) {
  size_t i = 0;
  while (i < n) {
    const size_t run = AsciiPrefix(p + i, n - i);
    if (run) {
      out->append(reinterpret_cast<const char*>(p + i), run);
      i += run;
      if (i >= n) break;
    }
    bool truncated;
    const int r = Scan(p + i, n - i, &truncated);
    if (r > 0) {
      out->append(reinterpret_cast<const char*>(p + i), r);
      i += r;
    } else if (truncated && hold_truncated) {
      return i;
    } else {
      out->append(kReplacement, 3);
      i += -r;
    }
  }
  return i;
}

}  // namespace

size_t FindInvalid(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    i += AsciiPrefix(p + i, n - i);
    if (i >= n) break;
    bool truncated;
    const int r = Scan(p + i, n - i, &truncated);
    if (r < 0) return i;
    i += r;
  }
  return kValid;
}

void AppendLossy(std::string_view bytes, std::string* out) {
  Decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), false, out);
}

void LossyStream::Append(std::string_view bytes, std::string* out) {
  if (bytes.empty()) return;
  // Complete the held character first; it needs at most 3 more bytes.
  if (pending_len_) {
    char buf[8];
    const size_t take = bytes.size() < 4 ? bytes.size() : 4;
    std::memcpy(buf, pending_, pending_len_);
    std::memcpy(buf + pending_len_, bytes.data(), take);
    const size_t used = Decode(reinterpret_cast<const uint8_t*>(buf), pending_len_ + take,
                               /*hold_truncated=*/true, out);
    if (used < pending_len_) {
      // Still incomplete (only possible when all of `bytes` was consumed into it).
      const size_t keep = pending_len_ + take - used;
      std::memmove(pending_, buf + used, keep);
      pending_len_ = keep;
      return;
    }
    bytes.remove_prefix(used - pending_len_);
    pending_len_ = 0;
    // Bytes of `take` that Decode held back are still in `bytes`: go on with the normal path.
    if (bytes.empty()) return;
  }
  const size_t used = Decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             /*hold_truncated=*/true, out);
  pending_len_ = bytes.size() - used;
  std::memcpy(pending_, bytes.data() + used, pending_len_);
}

void LossyStream::Finish(std::string* out) {
  if (pending_len_) AppendLossy(std::string_view(pending_, pending_len_), out);
  pending_len_ = 0;
}

}  // namespace q38::utf8
