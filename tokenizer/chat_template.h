// Chat templates rendered natively (there is no Jinja engine to run the shipped template).
//
// A template is recognised by its exact text; only recognised templates render, and each
// renderer refuses what it does not implement instead of producing a different prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace q38 {

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  // A separate reasoning field on assistant messages (absent = the template's "undefined").
  std::optional<std::string> reasoning_content;
  // Tool calls on assistant messages; the native renderers refuse them.
  bool has_tool_calls = false;
};

struct ChatOptions {
  bool add_generation_prompt = false;
  // The template's enable_thinking variable; nullopt = not passed.
  std::optional<bool> enable_thinking;
  // Tool definitions passed to the template; the native renderers refuse them.
  bool has_tools = false;
};

// One stretch of a rendered chat: the template's own text (role markers, think tags) or text that
// came from a message. Tokenizer::EncodeChat matches special tokens only in the template's own
// text, so a message cannot forge a control token by typing it.
struct ChatSegment {
  std::string text;
  bool from_template = false;
};

enum class ChatTemplateKind {
  kUnknown,
  kQwen3,  // the Qwen3 hybrid-thinking template
};

// Recognises a template from its Jinja source (exact text).
ChatTemplateKind IdentifyChatTemplate(std::string_view jinja_source);

// 64-bit FNV-1a of the template text: the fingerprint shown when a template is not recognised.
uint64_t ChatTemplateFingerprint(std::string_view jinja_source);

// What transformers' apply_chat_template(messages, tokenize=False, ...) returns for `kind`.
absl::StatusOr<std::string> RenderChat(ChatTemplateKind kind, absl::Span<const ChatMessage> messages,
                                       const ChatOptions& options);
// The same text cut into segments by origin (adjacent segments of one origin merged); their
// concatenation is RenderChat's text.
absl::StatusOr<std::vector<ChatSegment>> RenderChatSegments(ChatTemplateKind kind, absl::Span<const ChatMessage> messages,
                                                            const ChatOptions& options);

}  // namespace q38
