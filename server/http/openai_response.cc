#include "server/http/openai_response.h"

#include "absl/strings/str_cat.h"

namespace q38::http {

using nlohmann::json;

namespace {

// The logprobs object of each endpoint, before its first token.
json NoLogprobsYet(Endpoint e) {
  if (e == Endpoint::kChat) return {{"content", json::array()}};
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
}

}  // namespace

json ErrorBody(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
            {"code", code.empty() ? json() : json(code)}}}};
}

json FinishReason(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_EOS:
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    default:
      return json();
  }
}

ResponseBuilder::ResponseBuilder(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                                 const Tokenizer* tokenizer)
    : endpoint_(request.endpoint),
      logprobs_(request.generate.has_logprobs()),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(tokenizer) {
  logprobs_so_far_ = NoLogprobsYet(endpoint_);
}

json ResponseBuilder::Envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ResponseBuilder::Usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

std::string ResponseBuilder::TokenText(int32_t id) const {
  if (tokenizer_ == nullptr) return absl::StrCat("token_id:", id);
  const int32_t one[1] = {id};
  return tokenizer_->Decode(one);
}

json ResponseBuilder::Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

void ResponseBuilder::AppendLogprobs(const v1::GenerateResponse& message, json& into) {
  for (const v1::TokenLogprob& lp : message.logprobs()) {
    const std::string text = TokenText(lp.id());
    if (endpoint_ == Endpoint::kChat) {
      json top = json::array();
      for (const v1::TopLogprob& t : lp.top()) {
        const std::string alternative = TokenText(t.id());
        top.push_back({{"token", alternative}, {"logprob", t.logprob()}, {"bytes", Bytes(alternative)}});
      }
      into["content"].push_back({{"token", text}, {"logprob", lp.logprob()}, {"bytes", Bytes(text)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const v1::TopLogprob& t : lp.top()) {
        const std::string key = TokenText(t.id());
        if (!top.contains(key)) top[key] = t.logprob();  // ids of one text: the most likely one's
      }
      into["tokens"].push_back(text);
      into["token_logprobs"].push_back(lp.logprob());
      into["top_logprobs"].push_back(top);
      into["text_offset"].push_back(text_offset_);
    }
    text_offset_ += text.size();
  }
}

json ResponseBuilder::Chunk(const v1::GenerateResponse& message) {
  completion_tokens_ += message.token_ids_size();
  const bool last = message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (last) {
    prompt_tokens_ = message.usage().prompt_tokens();
    completion_tokens_ = message.usage().completion_tokens();
  }
  if (message.text().empty() && message.logprobs().empty() && !last) return json();
  json choice = {{"index", 0}, {"finish_reason", last ? FinishReason(message.finish_reason()) : json()}};
  json logprobs;
  if (logprobs_) {
    logprobs = NoLogprobsYet(endpoint_);
    AppendLogprobs(message, logprobs);
  }
  choice["logprobs"] = logprobs;
  if (endpoint_ == Endpoint::kChat) {
    choice["delta"] = message.text().empty() ? json::object() : json{{"content", message.text()}};
  } else {
    choice["text"] = message.text();
  }
  json chunk = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array({choice});
  return chunk;
}

json ResponseBuilder::RoleChunk() const {
  json chunk = Envelope("chat.completion.chunk");
  chunk["choices"] = json::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", json()}, {"finish_reason", json()}}});
  return chunk;
}

json ResponseBuilder::UsageChunk() const {
  json chunk = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = Usage();
  return chunk;
}

void ResponseBuilder::Add(const v1::GenerateResponse& message) {
  text_ += message.text();
  if (logprobs_) AppendLogprobs(message, logprobs_so_far_);
  completion_tokens_ += message.token_ids_size();
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    finish_ = message.finish_reason();
    prompt_tokens_ = message.usage().prompt_tokens();
    completion_tokens_ = message.usage().completion_tokens();
  }
}

json ResponseBuilder::Body() const {
  json choice = {{"index", 0}, {"finish_reason", FinishReason(finish_)}, {"logprobs", logprobs_ ? logprobs_so_far_ : json()}};
  json body;
  if (endpoint_ == Endpoint::kChat) {
    body = Envelope("chat.completion");
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    body = Envelope("text_completion");
    choice["text"] = text_;
  }
  body["choices"] = json::array({choice});
  body["usage"] = Usage();
  return body;
}

}  // namespace q38::http
