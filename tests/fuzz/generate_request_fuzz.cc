// Request validation on a GenerateRequest parsed from arbitrary bytes, as the server's handler
// runs it: ValidateGenerate, then (for text and chat) the small model's tokenizer and chat
// template, then ValidatePrompt. OK or InvalidArgument/FailedPrecondition, never a crash.
#include <cstdint>
#include <memory>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "server/validation.h"
#include "tokenizer/tokenizer.h"

namespace {

const q38::Tokenizer& SmallModelTokenizer() {
  static const std::unique_ptr<q38::Tokenizer> tok = *q38::Tokenizer::FromDirectory(Q38_SMALL_MODEL_DIR);
  return *tok;
}

}  // namespace

// protobuf logs an ERROR for each string field that is not UTF-8 (then fails the parse): silence it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const q38::ModelLimits limits{.vocab_size = SmallModelTokenizer().vocab_size(), .max_context = 4096};
  q38::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const absl::Status valid = q38::ValidateGenerate(req, limits);
  if (!valid.ok()) {
    if (!absl::IsInvalidArgument(valid)) __builtin_trap();
    return 0;
  }
  std::vector<int32_t> prompt;
  if (req.has_tokens()) {
    prompt.assign(req.tokens().ids().begin(), req.tokens().ids().end());
  } else if (req.has_text()) {
    auto ids = SmallModelTokenizer().Encode(req.text());
    if (!ids.ok()) __builtin_trap();  // validated UTF-8 always encodes
    prompt = *ids;
  } else {
    std::vector<q38::ChatMessage> messages;
    for (const auto& m : req.chat().messages()) messages.push_back({m.role(), m.content(), std::nullopt, false});
    auto segments = SmallModelTokenizer().ApplyChatTemplateSegments(messages, {.add_generation_prompt = true});
    if (!segments.ok()) return 0;  // an unknown role or no messages: refused by the template
    auto ids = SmallModelTokenizer().EncodeChat(*segments);
    if (!ids.ok()) __builtin_trap();
    prompt = *ids;
  }
  (void)q38::ValidatePrompt(prompt, req.max_tokens(), limits);
  return 0;
}
