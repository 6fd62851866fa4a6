#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace q38 {
namespace {

// True when NFC has a boundary before `cp` (UAX #15: NFC_QC=Yes and ccc=0): nothing before it
// can combine with it or be reordered across it. Conservative for characters it is unsure of.
bool ComputeBoundaryBefore(int32_t cp) {
  // Hangul vowel and trailing jamo compose with the syllable before them algorithmically.
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(cp);
  if (p->combining_class != 0) return false;
  // utf8proc marks the second character of a composition pair with comb_index >= 0x8000.
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
  if (p->decomp_type == 0 && p->decomp_seqindex != UINT16_MAX) {
    // A canonical decomposition: NFC_QC=Yes only for a primary composite, i.e. when NFC leaves
    // the character alone.
    utf8proc_uint8_t in[4];
    const utf8proc_ssize_t len = utf8proc_encode_char(cp, in);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(
        in, len, &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    const bool same = n == len && std::memcmp(in, out, len) == 0;
    std::free(out);
    return same;
  }
  return true;
}

// The BMP answers come from a bitmap built once; the rest (rare) are computed each time.
class BoundaryTable {
 public:
  BoundaryTable() : bits_(0x10000 / 8, 0) {
    for (int32_t cp = 0; cp < 0x10000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (ComputeBoundaryBefore(cp)) bits_[cp >> 3] |= static_cast<uint8_t>(1u << (cp & 7));
    }
  }
  bool Get(int32_t cp) const {
    if (cp < 0x10000) return (bits_[cp >> 3] >> (cp & 7)) & 1;
    return ComputeBoundaryBefore(cp);
  }

 private:
  std::vector<uint8_t> bits_;
};

inline bool BoundaryBefore(int32_t cp) {
  if (cp < 0x300) return true;  // ASCII and Latin-1 up to the combining marks: all boundaries
  static const BoundaryTable table;
  return table.Get(cp);
}

inline int32_t DecodeAt(const unsigned char* p, size_t* len) {
  const unsigned char b = p[0];
  if (b < 0x80) { *len = 1; return b; }
  if (b < 0xE0) { *len = 2; return ((b & 0x1F) << 6) | (p[1] & 0x3F); }
  if (b < 0xF0) { *len = 3; return ((b & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F); }
  *len = 4;
  return ((b & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void AppendNfc(std::string_view segment, std::string* out) {
  utf8proc_uint8_t* buf = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(segment.data()),
                   static_cast<utf8proc_ssize_t>(segment.size()), &buf,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // Only out-of-memory can fail here (the input is validated UTF-8): keep the text unchanged.
    out->append(segment);
  } else {
    out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  std::free(buf);
}

}  // namespace

std::string_view NfcNormalize(std::string_view text, std::string* storage) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  // A segment runs from one boundary to the next; it can only change under NFC when it holds
  // more than one character, or when its one character is not itself a boundary character.
  size_t seg_start = 0;
  bool seg_dirty = false;
  size_t copied = 0;  // text[0, copied) is already in *storage (once something changed)
  bool changed = false;
  auto flush = [&](size_t seg_end) {
    if (!seg_dirty) return;
    if (!changed) {
      storage->clear();
      changed = true;
    }
    storage->append(text.substr(copied, seg_start - copied));
    AppendNfc(text.substr(seg_start, seg_end - seg_start), storage);
    copied = seg_end;
  };
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // fast path: an ASCII character is a boundary and a segment of its own
      flush(i);
      seg_start = i;
      seg_dirty = false;
      ++i;
      while (i < n && p[i] < 0x80) ++i;
      seg_start = i - 1;
      continue;
    }
    size_t len;
    const int32_t cp = DecodeAt(p + i, &len);
    if (BoundaryBefore(cp)) {
      flush(i);
      seg_start = i;
      seg_dirty = false;
    } else {
      seg_dirty = true;
    }
    i += len;
  }
  flush(n);
  if (!changed) return text;
  storage->append(text.substr(copied));
  return *storage;
}

}  // namespace q38
