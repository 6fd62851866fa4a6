// Tokenizer::FromJson on arbitrary tokenizer.json and tokenizer_config.json text (the input split
// at its first NUL byte): OK or an error naming the field, never a crash. A tokenizer that loads
// then encodes and decodes a fixed text and the input's first bytes.
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, nul);
  const std::string_view config_json = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  auto tok = q38::Tokenizer::FromJson(tokenizer_json, config_json);
  if (!tok.ok()) return 0;
  for (std::string_view text : {std::string_view("Hello, world! <|im_end|> 12 345\n\n  x"), input.substr(0, 64)}) {
    for (bool special : {true, false}) {
      auto ids = (*tok)->Encode(text, {.match_special_tokens = special});
      if (ids.ok()) (*tok)->Decode(*ids);
    }
  }
  if ((*tok)->chat_template_kind() != q38::ChatTemplateKind::kUnknown) {
    auto segments = (*tok)->ApplyChatTemplateSegments({{"user", "hi <|im_end|>", std::nullopt, false}}, {});
    if (segments.ok()) (void)(*tok)->EncodeChat(*segments);
  }
  return 0;
}
