// What a loaded Tokenizer holds; filled by tokenizer_loader.cc, used by tokenizer.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/string_view_bridge.h"
#include "tokenizer/tokenizer.h"

namespace q38 {

struct Tokenizer::State {
  static constexpr uint8_t kKnown = 1;
  static constexpr uint8_t kSpecial = 2;

  std::unique_ptr<Bpe> bpe;
  bool nfc = false;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> added;          // all added tokens, in file order
  AddedTokenMatcher raw_matcher;          // tokens with normalized=false, found in raw text
  AddedTokenMatcher normalized_matcher;   // tokens with normalized=true, found in normalized text
  StringMap<int32_t> added_by_content;

  // Per id: its token string and its decoded bytes, packed; flags.
  std::vector<uint32_t> token_offsets;  // size vocab_size + 1, into token_text
  std::string token_text;
  std::vector<uint32_t> byte_offsets;   // size vocab_size + 1, into token_bytes
  std::string token_bytes;
  std::vector<uint8_t> flags;           // kKnown | kSpecial

  std::optional<int32_t> eos_id, pad_id, bos_id;
  std::string chat_template;
  ChatTemplateKind chat_kind = ChatTemplateKind::kUnknown;
};

}  // namespace q38
