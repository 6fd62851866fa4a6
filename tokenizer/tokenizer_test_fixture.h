// Test support: reads the parity fixtures written by tests/tokenizer/make_fixture.py and edits
// tokenizer.json texts. Kept apart from tokenizer_test.cc so the JSON library is compiled once
// and the tests themselves rebuild in seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace q38::tokenizer_test {

struct ParityCase {
  int variant = 0;
  std::string text;
  std::vector<int32_t> ids;                         // HF ids, special tokens matched
  std::optional<std::vector<int32_t>> ids_nosp;     // special tokens not matched, when different
  std::optional<std::string> decoded;               // HF decode(ids), when different from text
  std::optional<std::string> nfc;                   // NFC(text), when different from text
  std::optional<std::vector<int32_t>> pre_ends;     // HF pre-tokenizer piece ends, code points of NFC(text)
};

struct DecodeCase {
  std::vector<int32_t> ids;
  std::string text;       // HF decode
  std::string text_skip;  // HF decode, skip_special_tokens
};

struct ParityFixture {
  std::string tokenizers_version;
  std::vector<std::string> variant_names;
  std::vector<std::string> variant_patches;  // RFC 6902 patches, as JSON text
  std::string split_pattern;                 // the Qwen3 Split regex
  std::vector<ParityCase> strings;
  std::vector<DecodeCase> decodes;
};

struct ChatCase {
  std::vector<ChatMessage> messages;
  ChatOptions options;
  std::string text;  // what the Jinja template renders
  std::vector<int32_t> ids;
  std::string messages_json;  // for failure messages
};

ParityFixture LoadParityFixture(const std::string& path);
std::vector<ChatCase> LoadChatFixture(const std::string& path);

// Applies an RFC 6902 JSON patch to a JSON document (both as text).
std::string PatchJson(const std::string& document, const std::string& patch);

// A small byte-level BPE tokenizer.json (256 byte symbols, "he"+"ll" -> "hell" -> "hello", one
// special token <|end|> = 260), with `patch` (RFC 6902) applied.
std::string TinyTokenizerJson(const std::string& patch = "[]");

// JSON string literal for `s` (invalid UTF-8 replaced), for readable failure messages.
std::string Quote(const std::string& s);

}  // namespace q38::tokenizer_test
