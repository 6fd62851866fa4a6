#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"

namespace q38 {
Tokenizer::Tokenizer() : s_(std::make_unique<State>()) {}
Tokenizer::~Tokenizer() = default;

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(s_->token_offsets.size()) - 1; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return s_->eos_id; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return s_->pad_id; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return s_->bos_id; }
const std::string& Tokenizer::chat_template_source() const { return s_->chat_template; }
ChatTemplateKind Tokenizer::chat_template_kind() const { return s_->chat_kind; }

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       EncodeOptions options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  RETURN_IF_ERROR(EncodeTo(text, options, &ids));
  return ids;
}

absl::Status Tokenizer::EncodeTo(std::string_view text, EncodeOptions options,
                                 std::vector<int32_t>* ids) const {
  const bool match = options.match_special_tokens;
  return EncodeWhere(text, [match](size_t, size_t) { return match; }, ids);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeChat(absl::Span<const ChatSegment> segments) const {
  std::string text;
  std::vector<std::pair<size_t, size_t>> plain;  // [begin, end) of each message stretch, ascending
  for (const ChatSegment& s : segments) {
    if (!s.from_template) plain.emplace_back(text.size(), text.size() + s.text.size());
    text += s.text;
  }
  auto special_ok = [&plain](size_t begin, size_t end) {
    // Only the first message stretch ending after `begin` can overlap [begin, end).
    auto it = std::upper_bound(plain.begin(), plain.end(), begin,
                               [](size_t b, const std::pair<size_t, size_t>& r) { return b < r.second; });
    return it == plain.end() || it->first >= end;
  };
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  RETURN_IF_ERROR(EncodeWhere(text, special_ok, &ids));
  return ids;
}

absl::Status Tokenizer::EncodeWhere(std::string_view text, absl::FunctionRef<bool(size_t, size_t)> special_ok,
                                    std::vector<int32_t>* ids) const {
  const size_t bad = utf8::FindInvalid(text);
  if (bad != utf8::kValid) {
    return absl::InvalidArgumentError(
        absl::StrFormat("text to encode is not valid UTF-8 (invalid sequence at byte %d)", bad));
  }
  absl::Status piece_status = absl::OkStatus();
  RETURN_IF_ERROR(s_->raw_matcher.SplitWhere(
      text, special_ok,
      [&](std::string_view piece) {
        if (piece_status.ok()) {
          // Tokens matched after normalization have no offsets in `text`: they are special only
          // where the whole piece may hold special tokens.
          const size_t at = static_cast<size_t>(piece.data() - text.data());
          piece_status = EncodeNormalizedPiece(piece, special_ok(at, at + piece.size()), ids);
        }
      },
      [&](int32_t id) { ids->push_back(id); }));
  return piece_status;
}

// Normalizes a stretch of text between raw added tokens, then encodes it.
absl::Status Tokenizer::EncodeNormalizedPiece(std::string_view text, bool match_special,
                                              std::vector<int32_t>* ids) const {
  std::string storage;
  const std::string_view normalized = s_->nfc ? NfcNormalize(text, &storage) : text;
  auto to_bpe = [&](std::string_view piece) { s_->bpe->Encode(piece, ids); };
  if (s_->normalized_matcher.empty()) return s_->pre_tokenizer.Split(normalized, to_bpe);
  absl::Status status = absl::OkStatus();
  RETURN_IF_ERROR(s_->normalized_matcher.Split(
      normalized, match_special,
      [&](std::string_view piece) {
        if (status.ok()) status = s_->pre_tokenizer.Split(piece, to_bpe);
      },
      [&](int32_t id) { ids->push_back(id); }));
  return status;
}

void Tokenizer::AppendTokenBytes(int32_t id, DecodeOptions options, std::string* bytes) const {
  if (id < 0 || id >= vocab_size()) return;
  const uint8_t f = s_->flags[id];
  if (!(f & State::kKnown) || (options.skip_special_tokens && (f & State::kSpecial))) return;
  bytes->append(s_->token_bytes, s_->byte_offsets[id], s_->byte_offsets[id + 1] - s_->byte_offsets[id]);
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, DecodeOptions options) const {
  std::string bytes;
  for (int32_t id : ids) AppendTokenBytes(id, options, &bytes);
  if (utf8::FindInvalid(bytes) == utf8::kValid) return bytes;
  std::string text;
  utf8::AppendLossy(bytes, &text);
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = s_->added_by_content.find(token); it != s_->added_by_content.end()) return it->second;
  if (auto it = s_->bpe->vocab().find(token); it != s_->bpe->vocab().end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !(s_->flags[id] & State::kKnown)) return {};
  return std::string_view(s_->token_text).substr(s_->token_offsets[id],
                                              s_->token_offsets[id + 1] - s_->token_offsets[id]);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (s_->flags[id] & State::kSpecial);
}

absl::Status Tokenizer::CheckChatTemplate() const {
  if (s_->chat_template.empty()) {
    return absl::FailedPreconditionError("the tokenizer has no chat template (tokenizer_config.json)");
  }
  if (s_->chat_kind == ChatTemplateKind::kUnknown) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the chat template (fingerprint %016x) is not one this build renders natively (known: qwen3)",
        ChatTemplateFingerprint(s_->chat_template)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(absl::Span<const ChatMessage> messages,
                                                         const ChatOptions& options) const {
  RETURN_IF_ERROR(CheckChatTemplate());
  return RenderChat(s_->chat_kind, messages, options);
}

absl::StatusOr<std::vector<ChatSegment>> Tokenizer::ApplyChatTemplateSegments(absl::Span<const ChatMessage> messages,
                                                                              const ChatOptions& options) const {
  RETURN_IF_ERROR(CheckChatTemplate());
  return RenderChatSegments(s_->chat_kind, messages, options);
}

}  // namespace q38
