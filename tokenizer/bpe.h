// Byte-level BPE: turns one pre-tokenized piece into token ids by applying merges by rank.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tokenizer/string_view_bridge.h"
#include "absl/status/statusor.h"

namespace q38 {

class Bpe {
 public:
  struct Options {
    // HF's ignore_merges: a piece that is itself a vocab entry becomes that one token.
    bool ignore_merges = false;
  };

  // `vocab` maps tokens written in the byte-level alphabet to ids; `merges` lists token pairs
  // by rank (first = merged first). Every merge must join two vocab entries into a third, and
  // all 256 byte symbols must be in the vocab.
  static absl::StatusOr<std::unique_ptr<Bpe>> Create(
      StringMap<int32_t> vocab,
      const std::vector<std::pair<std::string_view, std::string_view>>& merges, Options options);

  // Appends the ids of `piece` (raw UTF-8 bytes, before the byte-level mapping).
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  const StringMap<int32_t>& vocab() const { return vocab_; }

 private:
  struct Rule {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Rule* FindRule(int32_t left, int32_t right) const {
    auto it = merges_.find(Key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void MergeShort(const unsigned char* bytes, size_t n, std::vector<int32_t>* out) const;
  void MergeLong(const unsigned char* bytes, size_t n, std::vector<int32_t>* out) const;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const;

  Bpe() = default;

  StringMap<int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Rule> merges_;
  std::array<int32_t, 256> byte_ids_{};
  Options options_;
  uint64_t instance_id_ = 0;  // keys the per-thread piece cache
};

}  // namespace q38
