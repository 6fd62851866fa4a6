// OpenAI response bodies and stream chunks from GenerateResponse messages: text and finish reason,
// usage from the last message, log probabilities in each endpoint's shape, errors in OpenAI's.
#include "server/http/openai_response.h"

#include <gtest/gtest.h>

namespace q38::http {
namespace {

using nlohmann::json;

OpenAiRequest Request(Endpoint e, std::optional<int> logprobs) {
  OpenAiRequest r;
  r.endpoint = e;
  if (logprobs) r.generate.set_logprobs(*logprobs);
  return r;
}

v1::GenerateResponse Tokens(std::vector<int32_t> ids, const std::string& text, bool with_logprobs) {
  v1::GenerateResponse m;
  for (int32_t id : ids) {
    m.add_token_ids(id);
    if (!with_logprobs) continue;
    v1::TokenLogprob* lp = m.add_logprobs();
    lp->set_id(id);
    lp->set_logprob(-0.5f);
    v1::TopLogprob* top = lp->add_top();
    top->set_id(id);
    top->set_logprob(-0.5f);
    top = lp->add_top();
    top->set_id(id + 1);
    top->set_logprob(-1.5f);
  }
  m.set_text(text);
  return m;
}

v1::GenerateResponse Last(v1::FinishReason reason, int prompt, int completion) {
  v1::GenerateResponse m;
  m.set_finish_reason(reason);
  m.mutable_usage()->set_prompt_tokens(prompt);
  m.mutable_usage()->set_completion_tokens(completion);
  return m;
}

TEST(OpenAiResponse, CompletionBodyCarriesTextUsageAndLogprobs) {
  ResponseBuilder b(Request(Endpoint::kCompletions, 1), "cmpl-1", "small", 100, nullptr);
  b.Add(Tokens({5, 6}, "ab", true));
  b.Add(Tokens({7}, "c", true));
  b.Add(Last(v1::FINISH_REASON_LENGTH, 4, 3));
  const json body = b.Body();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["model"], "small");
  EXPECT_EQ(body["choices"][0]["text"], "abc");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], (json{{"prompt_tokens", 4}, {"completion_tokens", 3}, {"total_tokens", 7}}));
  const json& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"token_id:5", "token_id:6", "token_id:7"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.5, -0.5, -0.5}));
  EXPECT_EQ(lp["top_logprobs"][2], (json{{"token_id:7", -0.5}, {"token_id:8", -1.5}}));
  EXPECT_EQ(lp["text_offset"], (json{0, 10, 20}));
}

TEST(OpenAiResponse, ChatBodyIsAnAssistantMessageAndEosIsStop) {
  ResponseBuilder b(Request(Endpoint::kChat, std::nullopt), "chatcmpl-1", "small", 100, nullptr);
  b.Add(Tokens({5}, "hi", false));
  b.Add(Last(v1::FINISH_REASON_EOS, 9, 1));
  const json body = b.Body();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiResponse, ChatChunksStreamDeltasThenTheFinishReason) {
  ResponseBuilder b(Request(Endpoint::kChat, 1), "chatcmpl-2", "small", 100, nullptr);
  EXPECT_EQ(b.RoleChunk()["choices"][0]["delta"]["role"], "assistant");
  const json c = b.Chunk(Tokens({5}, "h", true));
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"], (json{{"content", "h"}}));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  const json& content = c["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(content["token"], "token_id:5");
  EXPECT_EQ(content["bytes"].size(), std::string("token_id:5").size());
  EXPECT_EQ(content["top_logprobs"][1]["token"], "token_id:6");
  // A message with nothing to show (the text held back mid-character) sends no chunk.
  EXPECT_TRUE(b.Chunk(Tokens({}, "", false)).is_null());
  const json last = b.Chunk(Last(v1::FINISH_REASON_STOP, 3, 1));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  const json usage = b.UsageChunk();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 4);
}

TEST(OpenAiResponse, ErrorBodiesHaveOpenAisShape) {
  EXPECT_EQ(ErrorBody("n: only 1", "invalid_request_error", "n"),
            (json{{"error", {{"message", "n: only 1"}, {"type", "invalid_request_error"}, {"param", "n"}, {"code", nullptr}}}}));
  EXPECT_TRUE(ErrorBody("x", "server_error")["error"]["param"].is_null());
}

}  // namespace
}  // namespace q38::http
