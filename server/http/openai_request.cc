#include "server/http/openai_request.h"

#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/validation.h"

namespace q38::http {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The fields each endpoint takes; any other is refused by name.
const std::set<std::string>& KnownFields(Endpoint e) {
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "n", "stream",
      "stream_options", "logprobs", "ignore_eos", "presence_penalty", "frequency_penalty", "logit_bias", "user"};
  static const std::set<std::string> completions = [] {
    std::set<std::string> s = common;
    s.insert({"prompt", "echo", "best_of", "suffix"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    std::set<std::string> s = common;
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt", "chat_template_kwargs"});
    return s;
  }();
  return e == Endpoint::kChat ? chat : completions;
}

// A present, non-null field.
const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<int64_t> Integer(const json& v, const std::string& field) {
  if (!v.is_number_integer()) return Invalid(field, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return Invalid(field, "too large");
  return v.get<int64_t>();
}

absl::StatusOr<double> Number(const json& v, const std::string& field) {
  if (!v.is_number()) return Invalid(field, "must be a number");
  return v.get<double>();
}

absl::StatusOr<bool> Bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) return Invalid(field, "must be true or false");
  return v.get<bool>();
}

absl::StatusOr<std::string> String(const json& v, const std::string& field) {
  if (!v.is_string()) return Invalid(field, "must be a string");
  return v.get<std::string>();
}

// An integer field in [lo, hi], absent → nullopt.
absl::StatusOr<std::optional<int64_t>> Bounded(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  ASSIGN_OR_RETURN(int64_t x, Integer(*v, name));
  if (x < lo || x > hi) return Invalid(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", x));
  return x;
}

// Settings q38 does not implement are accepted only at their no-op value.
absl::Status OnlyNoOps(const json& body, Endpoint e) {
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = Field(body, name)) {
      ASSIGN_OR_RETURN(double x, Number(*v, name));
      if (x != 0) return Invalid(name, "not supported (only 0)");
    }
  }
  if (const json* v = Field(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty())) {
    return Invalid("logit_bias", "not supported (only empty)");
  }
  RETURN_IF_ERROR(Bounded(body, "n", 1, 1).status());
  if (e == Endpoint::kCompletions) {
    RETURN_IF_ERROR(Bounded(body, "best_of", 1, 1).status());
    if (const json* v = Field(body, "echo")) {
      ASSIGN_OR_RETURN(bool echo, Bool(*v, "echo"));
      if (echo) return Invalid("echo", "not supported (only false)");
    }
    if (Field(body, "suffix") != nullptr) return Invalid("suffix", "not supported");
  }
  if (const json* v = Field(body, "user")) RETURN_IF_ERROR(String(*v, "user").status());
  return absl::OkStatus();
}

absl::Status Prompt(const json& body, v1::GenerateRequest& out) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) return Invalid("prompt", "required");
  if (p->is_string()) {
    out.set_text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (!p->is_array() || p->empty()) return Invalid("prompt", "must be a string or a non-empty array of token ids");
  if ((*p)[0].is_string()) {
    if (p->size() > 1) return Invalid("prompt", "one prompt per request (n = 1)");
    out.set_text((*p)[0].get<std::string>());
    return absl::OkStatus();
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const json& id = (*p)[i];
    if (id.is_array()) return Invalid("prompt", "one prompt per request (n = 1)");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Invalid(absl::StrCat("prompt[", i, "]"), "must be a token id");
    }
    out.mutable_tokens()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status Messages(const json& body, v1::GenerateRequest& out) {
  const json* m = Field(body, "messages");
  if (m == nullptr) return Invalid("messages", "required");
  if (!m->is_array() || m->empty()) return Invalid("messages", "must be a non-empty array");
  v1::ChatInput* chat = out.mutable_chat();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return Invalid(at, "must be an object");
    for (const auto& [key, value] : msg.items()) {
      if (key != "role" && key != "content" && key != "name") return Invalid(absl::StrCat(at, ".", key), "unknown field");
    }
    const json* role = Field(msg, "role");
    if (role == nullptr) return Invalid(at + ".role", "required");
    ASSIGN_OR_RETURN(std::string r, String(*role, at + ".role"));
    if (r != "system" && r != "user" && r != "assistant") {
      return Invalid(at + ".role", absl::StrCat("must be system, user or assistant, got \"", r, "\""));
    }
    std::string text;
    if (const json* content = Field(msg, "content")) {
      if (content->is_string()) {
        text = content->get<std::string>();
      } else if (content->is_array()) {
        for (size_t j = 0; j < content->size(); ++j) {
          const json& part = (*content)[j];
          const std::string pat = absl::StrCat(at, ".content[", j, "]");
          if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string()) {
            return Invalid(pat, "only {\"type\": \"text\", \"text\": ...} parts");
          }
          text += part["text"].get<std::string>();
        }
      } else {
        return Invalid(at + ".content", "must be a string or an array of text parts");
      }
    } else if (r != "assistant") {
      return Invalid(at + ".content", "required");
    }
    v1::ChatMessage* cm = chat->add_messages();
    cm->set_role(r);
    cm->set_content(text);
  }
  if (const json* v = Field(body, "add_generation_prompt")) {
    ASSIGN_OR_RETURN(bool add, Bool(*v, "add_generation_prompt"));
    chat->set_add_generation_prompt(add);
  }
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return Invalid("chat_template_kwargs", "must be an object");
    for (const auto& [key, value] : kwargs->items()) {
      if (key != "enable_thinking") return Invalid("chat_template_kwargs." + key, "unknown (only enable_thinking)");
      ASSIGN_OR_RETURN(bool thinking, Bool(value, "chat_template_kwargs.enable_thinking"));
      chat->set_enable_thinking(thinking);
    }
  }
  return absl::OkStatus();
}

absl::Status Sampling(const json& body, v1::GenerateRequest& out) {
  v1::SamplingParams* s = out.mutable_sampling();
  double temperature = 1.0;  // OpenAI's default
  if (const json* v = Field(body, "temperature")) {
    ASSIGN_OR_RETURN(temperature, Number(*v, "temperature"));
    if (!(temperature >= 0 && temperature <= 2)) return Invalid("temperature", absl::StrCat("must be in [0, 2], got ", temperature));
  }
  s->set_temperature(static_cast<float>(temperature));
  if (const json* v = Field(body, "top_p")) {
    ASSIGN_OR_RETURN(double top_p, Number(*v, "top_p"));
    if (!(top_p > 0 && top_p <= 1)) return Invalid("top_p", absl::StrCat("must be in (0, 1], got ", top_p));
    s->set_top_p(static_cast<float>(top_p));
  }
  if (const json* v = Field(body, "top_k")) {
    ASSIGN_OR_RETURN(int64_t k, Integer(*v, "top_k"));
    if (k < -1 || k > INT32_MAX) return Invalid("top_k", absl::StrCat("must be ≥ -1 (-1 or 0: no limit), got ", k));
    s->set_top_k(k < 0 ? 0 : static_cast<int32_t>(k));
  }
  if (const json* v = Field(body, "seed")) {
    if (!v->is_number_integer()) return Invalid("seed", "must be an integer");
    s->set_seed(v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status Stops(const json& body, v1::GenerateRequest& out) {
  if (const json* v = Field(body, "stop")) {
    if (v->is_string()) {
      out.add_stop(v->get<std::string>());
    } else if (v->is_array() && v->size() <= 4) {
      for (size_t i = 0; i < v->size(); ++i) {
        ASSIGN_OR_RETURN(std::string stop, String((*v)[i], absl::StrCat("stop[", i, "]")));
        out.add_stop(stop);
      }
    } else {
      return Invalid("stop", "must be a string or an array of at most 4 strings");
    }
  }
  if (const json* v = Field(body, "stop_token_ids")) {
    if (!v->is_array()) return Invalid("stop_token_ids", "must be an array of token ids");
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string at = absl::StrCat("stop_token_ids[", i, "]");
      ASSIGN_OR_RETURN(int64_t id, Integer((*v)[i], at));
      if (id < 0 || id > INT32_MAX) return Invalid(at, "must be a token id");
      out.add_stop_token_ids(static_cast<int32_t>(id));
    }
  }
  return absl::OkStatus();
}

absl::Status Logprobs(const json& body, Endpoint e, v1::GenerateRequest& out) {
  if (e == Endpoint::kCompletions) {
    ASSIGN_OR_RETURN(std::optional<int64_t> k, Bounded(body, "logprobs", 0, kMaxLogprobs));
    if (k) out.set_logprobs(static_cast<int32_t>(*k));
    return absl::OkStatus();
  }
  bool wanted = false;
  if (const json* v = Field(body, "logprobs")) {
    ASSIGN_OR_RETURN(wanted, Bool(*v, "logprobs"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> k, Bounded(body, "top_logprobs", 0, kMaxLogprobs));
  if (k && !wanted) return Invalid("top_logprobs", "needs logprobs: true");
  if (wanted) out.set_logprobs(static_cast<int32_t>(k.value_or(0)));
  return absl::OkStatus();
}

absl::Status MaxTokens(const json& body, Endpoint e, v1::GenerateRequest& out) {
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, Bounded(body, "max_tokens", 1, INT32_MAX));
  if (e == Endpoint::kChat) {
    ASSIGN_OR_RETURN(std::optional<int64_t> mct, Bounded(body, "max_completion_tokens", 1, INT32_MAX));
    if (mct && max_tokens && *mct != *max_tokens) return Invalid("max_completion_tokens", "differs from max_tokens");
    if (mct) max_tokens = mct;
  }
  // Completions default to OpenAI's 16; chat to the rest of the context (0 here, resolved once
  // the prompt is tokenized).
  out.set_max_tokens(static_cast<int32_t>(max_tokens.value_or(e == Endpoint::kCompletions ? 16 : 0)));
  return absl::OkStatus();
}

absl::Status CheckModel(const json& body, const std::string& served_model) {
  if (const json* v = Field(body, "model")) {
    ASSIGN_OR_RETURN(std::string model, String(*v, "model"));
    if (model != served_model) {
      return absl::NotFoundError(absl::StrCat("model: the model \"", model, "\" does not exist; this server serves \"",
                                              served_model, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status OnlyFields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) return Invalid("body", "must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) return Invalid(key, "unknown field");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, Endpoint endpoint, const std::string& served_model) {
  RETURN_IF_ERROR(OnlyFields(body, KnownFields(endpoint)));
  RETURN_IF_ERROR(CheckModel(body, served_model));
  OpenAiRequest r;
  r.endpoint = endpoint;
  RETURN_IF_ERROR(OnlyNoOps(body, endpoint));
  RETURN_IF_ERROR(endpoint == Endpoint::kChat ? Messages(body, r.generate) : Prompt(body, r.generate));
  RETURN_IF_ERROR(MaxTokens(body, endpoint, r.generate));
  RETURN_IF_ERROR(Sampling(body, r.generate));
  RETURN_IF_ERROR(Stops(body, r.generate));
  RETURN_IF_ERROR(Logprobs(body, endpoint, r.generate));
  if (const json* v = Field(body, "ignore_eos")) {
    ASSIGN_OR_RETURN(bool ignore, Bool(*v, "ignore_eos"));
    r.generate.set_ignore_eos(ignore);
  }
  if (const json* v = Field(body, "stream")) {
    ASSIGN_OR_RETURN(r.stream, Bool(*v, "stream"));
  }
  if (const json* v = Field(body, "stream_options")) {
    if (!r.stream) return Invalid("stream_options", "only with stream: true");
    if (!v->is_object()) return Invalid("stream_options", "must be an object");
    for (const auto& [key, value] : v->items()) {
      if (key != "include_usage") return Invalid("stream_options." + key, "unknown field");
      ASSIGN_OR_RETURN(r.include_usage, Bool(value, "stream_options.include_usage"));
    }
  }
  return r;
}

absl::StatusOr<v1::GenerateRequest> ParseTokenizeRequest(const json& body, const std::string& served_model) {
  RETURN_IF_ERROR(OnlyFields(body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"}));
  RETURN_IF_ERROR(CheckModel(body, served_model));
  if (const json* v = Field(body, "add_special_tokens")) RETURN_IF_ERROR(Bool(*v, "add_special_tokens").status());
  v1::GenerateRequest r;
  if (Field(body, "messages") != nullptr) {
    if (Field(body, "prompt") != nullptr) return Invalid("prompt", "give prompt or messages, not both");
    RETURN_IF_ERROR(Messages(body, r));
    return r;
  }
  if (Field(body, "add_generation_prompt") != nullptr) return Invalid("add_generation_prompt", "only with messages");
  const json* p = Field(body, "prompt");
  if (p == nullptr) return Invalid("prompt", "required (or messages)");
  ASSIGN_OR_RETURN(std::string text, String(*p, "prompt"));
  r.set_text(text);
  return r;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const json& body, const std::string& served_model) {
  RETURN_IF_ERROR(OnlyFields(body, {"model", "tokens"}));
  RETURN_IF_ERROR(CheckModel(body, served_model));
  const json* t = Field(body, "tokens");
  if (t == nullptr || !t->is_array()) return Invalid("tokens", "required: an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string at = absl::StrCat("tokens[", i, "]");
    ASSIGN_OR_RETURN(int64_t id, Integer((*t)[i], at));
    if (id < 0 || id > INT32_MAX) return Invalid(at, "must be a token id");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string OpenAiParam(const absl::Status& error, Endpoint endpoint) {
  const std::string message(error.message());
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return "";
  std::string field(message.substr(0, colon));
  if (field.find(' ') != std::string::npos) return "";  // a sentence, not a field
  // The shared validation names q38.v1 fields; OpenAI's names for them.
  const std::string input = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (absl::StartsWith(field, "sampling.")) return field.substr(9);
  if (field == "input" || field == "text" || absl::StartsWith(field, "tokens.")) return input;
  if (absl::StartsWith(field, "chat.messages")) return field.substr(5);
  if (field == "chat") return "messages";
  return field;
}

}  // namespace q38::http
