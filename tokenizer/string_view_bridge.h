// Bridges between std::string_view and Debian's Abseil, whose absl::string_view is its own type
// (so absl::StrCat and Abseil's string hashing do not take a std::string_view).
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace q38 {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return absl::Hash<std::string_view>{}(s); }
};

struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

// A hash map from std::string that can be searched with a std::string_view without a copy.
template <class V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view FromAbsl(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace q38
