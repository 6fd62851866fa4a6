// The tokenizer of the byte-level BPE family, loaded from a Hugging Face tokenizer.json (and
// tokenizer_config.json), giving the same ids as HF `tokenizers`.
//
// Pipeline of Encode: added tokens are cut out of the raw text, the rest is NFC-normalized,
// pre-tokenized (Split regexes, then ByteLevel) and each piece is BPE-encoded. Decode maps ids
// back to bytes and decodes them as UTF-8, replacing invalid sequences by U+FFFD.
//
// A Tokenizer is immutable after loading; all methods may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/chat_template.h"

namespace q38 {

struct EncodeOptions {
  // Whether special added tokens written in the text become their ids. When false they are
  // encoded as plain text (HF's encode_special_tokens / split_special_tokens). Non-special added
  // tokens are always matched, as in HF.
  bool match_special_tokens = true;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  // From file contents; `tokenizer_config_json` may be empty. Errors name the file and field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view tokenizer_config_json);

  // `text` must be valid UTF-8, else InvalidArgumentError naming the byte offset.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, EncodeOptions options = {}) const;
  // Appends to `ids` instead of returning a new vector (on error, `ids` may hold part of it).
  absl::Status EncodeTo(std::string_view text, EncodeOptions options, std::vector<int32_t>* ids) const;

  // Encodes a rendered chat (RenderChatSegments) as Encode encodes the concatenated text, except
  // that special tokens are matched only where they lie wholly in the template's own text: inside
  // message text they are plain text, as with match_special_tokens = false. A message without
  // special tokens in it gets exactly Encode's ids.
  absl::StatusOr<std::vector<int32_t>> EncodeChat(absl::Span<const ChatSegment> segments) const;

  // Ids outside the vocabulary decode to nothing, as in HF.
  std::string Decode(absl::Span<const int32_t> ids, DecodeOptions options = {}) const;
  // Appends the raw bytes of `id` (nothing for unknown ids, or skipped special tokens).
  void AppendTokenBytes(int32_t id, DecodeOptions options, std::string* bytes) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token as written in tokenizer.json (byte-level alphabet for model tokens); empty if unknown.
  std::string_view IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One past the largest id of the model vocab and the added tokens.
  int32_t vocab_size() const;

  // From tokenizer_config.json (nullopt when not set there).
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  std::optional<int32_t> bos_token_id() const;

  // The chat template from tokenizer_config.json ("" when there is none).
  const std::string& chat_template_source() const;
  ChatTemplateKind chat_template_kind() const;
  // Renders `messages` with the model's chat template; FailedPrecondition when the template is
  // missing or not one this build renders natively.
  absl::StatusOr<std::string> ApplyChatTemplate(absl::Span<const ChatMessage> messages,
                                                const ChatOptions& options) const;
  // The same, cut into the template's own text and message text, for EncodeChat.
  absl::StatusOr<std::vector<ChatSegment>> ApplyChatTemplateSegments(absl::Span<const ChatMessage> messages,
                                                                     const ChatOptions& options) const;

 private:
  friend class TokenizerLoader;
  struct State;  // tokenizer_state.h

  Tokenizer();
  // EncodeTo with special tokens taken where special_ok(begin, end) of `text` holds.
  absl::Status EncodeWhere(std::string_view text, absl::FunctionRef<bool(size_t, size_t)> special_ok,
                           std::vector<int32_t>* ids) const;
  absl::Status CheckChatTemplate() const;
  absl::Status EncodeNormalizedPiece(std::string_view text, bool match_special,
                                     std::vector<int32_t>* ids) const;

  std::unique_ptr<State> s_;
};

}  // namespace q38
