// The OpenAI response bodies and server-sent-event chunks (docs/api.md) built from the shared
// lifecycle's q38.v1.GenerateResponse messages: text, finish reason, usage, and log probabilities
// with each token's text (and, for chat, its bytes).
#pragma once

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "q38/v1/q38.pb.h"
#include "server/http/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace q38::http {

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
nlohmann::json ErrorBody(const std::string& message, const std::string& type, const std::string& param = "",
                         const std::string& code = "");

// "stop" (the model's end of text, a stop string or id) or "length"; null while running.
nlohmann::json FinishReason(v1::FinishReason reason);

class ResponseBuilder {
 public:
  // `tokenizer` may be null (a model that ships none: tokens show as "token_id:N").
  ResponseBuilder(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                  const Tokenizer* tokenizer);

  // Streaming: the chunk for one message (null when it carries nothing to send), the chat's
  // opening chunk (the assistant role), and the usage chunk of stream_options.include_usage.
  nlohmann::json Chunk(const v1::GenerateResponse& message);
  nlohmann::json RoleChunk() const;
  nlohmann::json UsageChunk() const;

  // Not streaming: every message added, then the whole body.
  void Add(const v1::GenerateResponse& message);
  nlohmann::json Body() const;

 private:
  nlohmann::json Envelope(const char* object) const;
  nlohmann::json Usage() const;
  // The log probabilities of `message`'s tokens in this endpoint's shape, appended to `into`.
  void AppendLogprobs(const v1::GenerateResponse& message, nlohmann::json& into);
  std::string TokenText(int32_t id) const;
  static nlohmann::json Bytes(const std::string& text);

  const Endpoint endpoint_;
  const bool logprobs_;
  const std::string id_, model_;
  const int64_t created_;
  const Tokenizer* tokenizer_;
  std::string text_;  // so far (Body)
  nlohmann::json logprobs_so_far_;
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
  int32_t prompt_tokens_ = 0, completion_tokens_ = 0;
  size_t text_offset_ = 0;  // bytes of token text so far (completions' text_offset)
};

}  // namespace q38::http
