#include "tokenizer/bpe.h"

#include <atomic>
#include <climits>
#include <cstring>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tokenizer/byte_level.h"

namespace q38 {
namespace {

// Pieces up to this many bytes merge with a linear scan over a small array; longer ones (long
// runs of spaces or punctuation) use a priority queue over a linked list.
constexpr size_t kShortPiece = 48;

// Most pieces repeat (common words, indentation), so each thread remembers recent results. The
// cache is per thread so lookups take no lock; it is dropped when full or when another Bpe
// instance is used on the thread.
constexpr size_t kCacheMaxPieceBytes = 32;
constexpr size_t kCacheMaxEntries = 1 << 16;

struct PieceCache {
  uint64_t owner = 0;
  StringMap<std::pair<uint32_t, uint32_t>> entries;  // -> [begin, len)
  std::vector<int32_t> ids;

  void Reset(uint64_t new_owner) {
    owner = new_owner;
    entries.clear();
    ids.clear();
  }
};

PieceCache& Cache() {
  thread_local PieceCache cache;
  return cache;
}

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

absl::StatusOr<std::unique_ptr<Bpe>> Bpe::Create(
    StringMap<int32_t> vocab,
    const std::vector<std::pair<std::string_view, std::string_view>>& merges, Options options) {
  std::unique_ptr<Bpe> bpe(new Bpe());
  bpe->options_ = options;
  bpe->instance_id_ = g_next_instance.fetch_add(1);
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    std::string symbol;
    byte_level::EncodeBytes(std::string_view(&byte, 1), &symbol);
    auto it = vocab.find(symbol);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.vocab lacks the byte-level symbol '%s' for byte 0x%02x (not a byte-level BPE vocab)",
          symbol, b));
    }
    bpe->byte_ids_[b] = it->second;
  }
  bpe->merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab.find(a);
    auto ib = vocab.find(b);
    joined.assign(a);
    joined.append(b);
    auto ij = vocab.find(joined);
    if (ia == vocab.end() || ib == vocab.end() || ij == vocab.end()) {
      const std::string_view missing = ia == vocab.end() ? a : ib == vocab.end() ? b : joined;
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.merges[%d] ('%s' '%s'): token '%s' is not in model.vocab", rank, a, b, missing));
    }
    // A repeated pair keeps its last rank, as HF's map does.
    bpe->merges_.insert_or_assign(Key(ia->second, ib->second),
                                  Rule{static_cast<int32_t>(rank), ij->second});
  }
  bpe->vocab_ = std::move(vocab);
  return bpe;
}

void Bpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    out->push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kCacheMaxPieceBytes) {
    EncodeUncached(piece, out);
    return;
  }
  PieceCache& cache = Cache();
  if (cache.owner != instance_id_) cache.Reset(instance_id_);
  auto it = cache.entries.find(piece);
  if (it != cache.entries.end()) {
    const int32_t* ids = cache.ids.data() + it->second.first;
    out->insert(out->end(), ids, ids + it->second.second);
    return;
  }
  const size_t before = out->size();
  EncodeUncached(piece, out);
  if (cache.entries.size() >= kCacheMaxEntries) cache.Reset(instance_id_);
  const size_t count = out->size() - before;
  cache.entries.emplace(piece, std::make_pair(static_cast<uint32_t>(cache.ids.size()),
                                              static_cast<uint32_t>(count)));
  cache.ids.insert(cache.ids.end(), out->begin() + before, out->end());
}

void Bpe::EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    std::string symbols;
    byte_level::EncodeBytes(piece, &symbols);
    auto it = vocab_.find(symbols);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.size() <= kShortPiece) {
    MergeShort(bytes, piece.size(), out);
  } else {
    MergeLong(bytes, piece.size(), out);
  }
}

// Repeatedly merges the pair of lowest rank (leftmost on ties), which is the order HF's
// priority queue produces.
void Bpe::MergeShort(const unsigned char* bytes, size_t n, std::vector<int32_t>* out) const {
  int32_t ids[kShortPiece];
  int32_t rank[kShortPiece];    // rank[i]: rank of merging ids[i] with ids[i + 1]
  int32_t merged[kShortPiece];  // merged[i]: the token that merge makes
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids_[bytes[i]];
  auto score = [&](size_t i) {
    const Rule* r = FindRule(ids[i], ids[i + 1]);
    rank[i] = r ? r->rank : INT32_MAX;
    merged[i] = r ? r->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) score(i);
  size_t count = n;
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT32_MAX) break;
    ids[best] = merged[best];
    const size_t tail = count - best - 2;  // entries after the consumed right symbol
    std::memmove(ids + best + 1, ids + best + 2, tail * sizeof(int32_t));
    std::memmove(rank + best + 1, rank + best + 2, tail * sizeof(int32_t));
    std::memmove(merged + best + 1, merged + best + 2, tail * sizeof(int32_t));
    --count;
    if (best > 0) score(best - 1);
    if (best + 1 < count) score(best);
  }
  out->insert(out->end(), ids, ids + count);
}

void Bpe::MergeLong(const unsigned char* bytes, size_t n, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;  // -1: none
    int32_t next;  // -1: none
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;          // left symbol
    int32_t left, right;  // the pair when queued: stale once either side has changed
    int32_t id;           // merged token
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = Symbol{byte_ids_[bytes[i]], static_cast<int32_t>(i) - 1,
                    i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const Rule* r = FindRule(sym[pos].id, sym[next].id)) {
      queue.push({r->rank, pos, sym[pos].id, sym[next].id, r->id});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0 || left.id != top.left || sym[left.next].id != top.right) continue;
    Symbol& right = sym[left.next];
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace q38
