#include "tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace q38 {
namespace {

// Fingerprints of the template texts each renderer reproduces.
constexpr uint64_t kQwen3Fingerprint = 0x2bfdb7aa9754484eull;  // Qwen3 tokenizer_config.json

// Python's str.lstrip / rstrip / strip with a set of one character.
std::string_view LStrip(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  return s;
}
std::string_view RStrip(std::string_view s, char c) {
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}
std::string_view Strip(std::string_view s, char c) { return RStrip(LStrip(s, c), c); }

// Python's s.split(sep)[-1] and s.split(sep)[0].
std::string_view AfterLast(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}
std::string_view BeforeFirst(std::string_view s, std::string_view sep) {
  const size_t at = s.find(sep);
  return at == std::string_view::npos ? s : s.substr(0, at);
}

// Appends rendered text, remembering which stretches came from messages.
class ChatWriter {
 public:
  // The template's own text.
  ChatWriter& operator+=(std::string_view text) { return Add(text, true); }
  // Text from a message (content, reasoning, tool output).
  ChatWriter& Content(std::string_view text) { return Add(text, false); }
  std::vector<ChatSegment> Take() { return std::move(segments_); }

 private:
  ChatWriter& Add(std::string_view text, bool from_template) {
    if (text.empty()) return *this;
    if (segments_.empty() || segments_.back().from_template != from_template) segments_.push_back({"", from_template});
    segments_.back().text.append(text);
    return *this;
  }
  std::vector<ChatSegment> segments_;
};

// The Qwen3 template: system prompt first, thinking blocks kept only on assistant turns after
// the last real user query, tool results folded into user turns.
absl::StatusOr<std::vector<ChatSegment>> RenderQwen3(absl::Span<const ChatMessage> messages,
                                                     const ChatOptions& options) {
  if (options.has_tools) {
    return absl::UnimplementedError("qwen3 chat template: tool definitions are not supported by the native renderer");
  }
  if (messages.empty()) return absl::InvalidArgumentError("qwen3 chat template: no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return absl::InvalidArgumentError(
          absl::StrFormat("qwen3 chat template: message %d has unsupported role '%s'", i, m.role));
    }
    if (m.has_tool_calls) {
      return absl::UnimplementedError(absl::StrFormat(
          "qwen3 chat template: message %d has tool calls, which the native renderer does not support", i));
    }
  }

  ChatWriter out;
  if (messages[0].role == "system") {
    (out += "<|im_start|>system\n").Content(messages[0].content) += "<|im_end|>\n";
  }
  // The last user message that is not only a tool response.
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(absl::StartsWith(m.content, "<tool_response>") &&
                              absl::EndsWith(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      (out += absl::StrCat("<|im_start|>", m.role, "\n")).Content(m.content) += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      std::string_view reasoning;
      if (m.reasoning_content.has_value()) {
        reasoning = *m.reasoning_content;
      } else if (absl::StrContains(m.content, "</think>")) {
        content = LStrip(AfterLast(m.content, "</think>"), '\n');
        reasoning = LStrip(AfterLast(RStrip(BeforeFirst(m.content, "</think>"), '\n'), "<think>"), '\n');
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n";
        out.Content(Strip(reasoning, '\n'));
        out += "\n</think>\n\n";
        out.Content(LStrip(content, '\n'));
      } else {
        out += "<|im_start|>assistant\n";
        out.Content(content);
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      (out += "\n<tool_response>\n").Content(m.content) += "\n</tool_response>";
      if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking.has_value() && !*options.enable_thinking) {
      out += "<think>\n\n</think>\n\n";
    }
  }
  return out.Take();
}

}  // namespace

uint64_t ChatTemplateFingerprint(std::string_view jinja_source) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : jinja_source) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

ChatTemplateKind IdentifyChatTemplate(std::string_view jinja_source) {
  if (ChatTemplateFingerprint(jinja_source) == kQwen3Fingerprint) return ChatTemplateKind::kQwen3;
  return ChatTemplateKind::kUnknown;
}

absl::StatusOr<std::vector<ChatSegment>> RenderChatSegments(ChatTemplateKind kind, absl::Span<const ChatMessage> messages,
                                                            const ChatOptions& options) {
  switch (kind) {
    case ChatTemplateKind::kQwen3:
      return RenderQwen3(messages, options);
    case ChatTemplateKind::kUnknown:
      break;
  }
  return absl::FailedPreconditionError("chat template is not one this build renders natively");
}

absl::StatusOr<std::string> RenderChat(ChatTemplateKind kind, absl::Span<const ChatMessage> messages,
                                       const ChatOptions& options) {
  absl::StatusOr<std::vector<ChatSegment>> segments = RenderChatSegments(kind, messages, options);
  if (!segments.ok()) return segments.status();
  std::string out;
  for (const ChatSegment& s : *segments) out += s.text;
  return out;
}

}  // namespace q38
