#include "server/validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/unknown_field_set.h"
#include "tokenizer/utf8.h"

namespace q38 {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

void CollectUnknown(const Message& m, const std::string& path, std::vector<std::string>& out) {
  const auto* reflection = m.GetReflection();
  const auto& unknown = reflection->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    out.push_back(absl::StrCat(path.empty() ? "" : path + ".", "field ", unknown.field(i).number()));
  }
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string sub = path.empty() ? f->name() : path + "." + f->name();
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(m, f); ++i) {
        CollectUnknown(reflection->GetRepeatedMessage(m, f, i), absl::StrCat(sub, "[", i, "]"), out);
      }
    } else {
      CollectUnknown(reflection->GetMessage(m, f), sub, out);
    }
  }
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Text fields must be UTF-8: a stop string that is not could never match the decoded stream, and
// chat text would fail in the tokenizer at an offset of the rendered prompt instead of the field's.
absl::Status CheckUtf8(const std::string& text, const std::string& field) {
  const size_t bad = utf8::FindInvalid(text);
  if (bad == utf8::kValid) return absl::OkStatus();
  return Invalid(field, absl::StrCat("not valid UTF-8 (invalid sequence at byte ", bad, ")"));
}

}  // namespace

absl::Status RejectUnknownFields(const Message& message) {
  std::vector<std::string> unknown;
  CollectUnknown(message, "", unknown);
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown fields: ", absl::StrJoin(unknown, ", ")));
}

absl::Status ValidateGenerate(const v1::GenerateRequest& r, const ModelLimits& limits) {
  if (absl::Status s = RejectUnknownFields(r); !s.ok()) return s;
  if (r.input_case() == v1::GenerateRequest::INPUT_NOT_SET) return Invalid("input", "set one of tokens, text or chat");
  if (r.max_tokens() <= 0) return Invalid("max_tokens", absl::StrCat("must be positive, got ", r.max_tokens()));
  if (r.max_tokens() >= limits.max_context) {
    return Invalid("max_tokens", absl::StrCat(r.max_tokens(), " leaves no room for a prompt in the context of ", limits.max_context));
  }
  const auto& s = r.sampling();
  if (s.has_temperature() && !(s.temperature() >= 0 && std::isfinite(s.temperature()))) {
    return Invalid("sampling.temperature", absl::StrCat("must be a finite number ≥ 0, got ", s.temperature()));
  }
  if (s.has_top_p() && !(s.top_p() > 0 && s.top_p() <= 1)) {
    return Invalid("sampling.top_p", absl::StrCat("must be in (0, 1], got ", s.top_p()));
  }
  if (s.has_top_k() && s.top_k() < 0) return Invalid("sampling.top_k", absl::StrCat("must be ≥ 0, got ", s.top_k()));
  if (r.has_logprobs() && (r.logprobs() < 0 || r.logprobs() > kMaxLogprobs)) {
    return Invalid("logprobs", absl::StrCat("must be in [0, ", kMaxLogprobs, "], got ", r.logprobs()));
  }
  for (int i = 0; i < r.stop_token_ids_size(); ++i) {
    const int32_t id = r.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "]"), absl::StrCat(id, " is outside the vocabulary of ", limits.vocab_size));
    }
  }
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).empty()) return Invalid(absl::StrCat("stop[", i, "]"), "empty stop string");
    RETURN_IF_ERROR(CheckUtf8(r.stop(i), absl::StrCat("stop[", i, "]")));
  }
  if (r.has_text()) RETURN_IF_ERROR(CheckUtf8(r.text(), "text"));
  for (int i = 0; i < r.chat().messages_size(); ++i) {
    const auto& m = r.chat().messages(i);
    RETURN_IF_ERROR(CheckUtf8(m.role(), absl::StrCat("chat.messages[", i, "].role")));
    RETURN_IF_ERROR(CheckUtf8(m.content(), absl::StrCat("chat.messages[", i, "].content")));
  }
  return absl::OkStatus();
}

absl::Status ValidatePrompt(const std::vector<int32_t>& prompt, int32_t max_tokens, const ModelLimits& limits) {
  if (prompt.empty()) return Invalid("input", "empty prompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= limits.vocab_size) {
      return Invalid(absl::StrCat("tokens.ids[", i, "]"), absl::StrCat(prompt[i], " is outside the vocabulary of ", limits.vocab_size));
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_tokens;
  if (static_cast<int64_t>(prompt.size()) >= limits.max_context) {
    return Invalid("input", absl::StrCat("prompt of ", prompt.size(), " tokens exceeds the context of ", limits.max_context));
  }
  if (total > limits.max_context) {
    return Invalid("max_tokens", absl::StrCat("prompt (", prompt.size(), ") + max_tokens (", max_tokens,
                                              ") exceeds the context of ", limits.max_context));
  }
  return absl::OkStatus();
}

}  // namespace q38
