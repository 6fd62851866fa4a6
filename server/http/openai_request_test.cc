// OpenAI request bodies into q38.v1.GenerateRequest: every field mapped, every unsupported or
// malformed one refused naming it, and the shared validation's field names given OpenAI's.
#include "server/http/openai_request.h"

#include <gtest/gtest.h>

namespace q38::http {
namespace {

using nlohmann::json;

absl::StatusOr<OpenAiRequest> Parse(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return ParseOpenAiRequest(json::parse(body), e, "small");
}

// The request is refused as INVALID_ARGUMENT about `param`.
void ExpectRefused(const std::string& body, const std::string& param, Endpoint e = Endpoint::kCompletions) {
  absl::StatusOr<OpenAiRequest> r = Parse(body, e);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body << ": " << r.status();
  EXPECT_EQ(OpenAiParam(r.status(), e), param) << body << ": " << r.status();
}

TEST(OpenAiRequest, CompletionFieldsMapOntoTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> r = Parse(R"({"model": "small", "prompt": "hi", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 3, "seed": 11, "stop": ["a", "b"], "logprobs": 2, "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "presence_penalty": 0, "frequency_penalty": 0,
      "logit_bias": {}, "user": "u", "echo": false, "best_of": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.text(), "hi");
  EXPECT_EQ(g.max_tokens(), 7);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 3);
  EXPECT_EQ(g.sampling().seed(), 11u);
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "b");
  EXPECT_EQ(g.logprobs(), 2);
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiRequest, DefaultsAreOpenAisAndNothingIsAskedThatWasNotSent) {
  absl::StatusOr<OpenAiRequest> r = Parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.tokens().ids_size(), 3);
  EXPECT_EQ(r->generate.max_tokens(), 16);
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r->generate.sampling().has_seed());
  EXPECT_FALSE(r->generate.has_logprobs());
  EXPECT_FALSE(r->stream);
  // An array of one string is that string; top_k −1 is no limit.
  r = Parse(R"({"prompt": ["one"], "top_k": -1, "stop": "x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.text(), "one");
  EXPECT_EQ(r->generate.sampling().top_k(), 0);
  EXPECT_EQ(r->generate.stop(0), "x");
}

TEST(OpenAiRequest, ChatMessagesGoThroughAsChatInput) {
  absl::StatusOr<OpenAiRequest> r = Parse(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}], "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"enable_thinking": false}})",
                                          Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::ChatInput& chat = r->generate.chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(1).content(), "ab");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_FALSE(chat.enable_thinking());
  EXPECT_EQ(r->generate.max_tokens(), 5);
  EXPECT_EQ(r->generate.logprobs(), 3);
  // Without max_tokens: 0, the rest of the context once the prompt is known.
  r = Parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.max_tokens(), 0);
  EXPECT_EQ(r->generate.logprobs(), 0);
}

TEST(OpenAiRequest, UnsupportedAndMalformedFieldsAreRefusedByName) {
  ExpectRefused(R"({"prompt": "x", "n": 2})", "n");
  ExpectRefused(R"({"prompt": "x", "temperature": -1})", "temperature");
  ExpectRefused(R"({"prompt": "x", "temperature": 2.5})", "temperature");
  ExpectRefused(R"({"prompt": "x", "temperature": "hot"})", "temperature");
  ExpectRefused(R"({"prompt": "x", "top_p": 0})", "top_p");
  ExpectRefused(R"({"prompt": "x", "max_tokens": 0})", "max_tokens");
  ExpectRefused(R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens");
  ExpectRefused(R"({"prompt": "x", "logprobs": 21})", "logprobs");
  ExpectRefused(R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty");
  ExpectRefused(R"({"prompt": "x", "frequency_penalty": 1})", "frequency_penalty");
  ExpectRefused(R"({"prompt": "x", "logit_bias": {"5": 1}})", "logit_bias");
  ExpectRefused(R"({"prompt": "x", "echo": true})", "echo");
  ExpectRefused(R"({"prompt": "x", "best_of": 2})", "best_of");
  ExpectRefused(R"({"prompt": "x", "bogus_field": 1})", "bogus_field");
  ExpectRefused(R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop");
  ExpectRefused(R"({"prompt": "x", "stop": [1]})", "stop[0]");
  ExpectRefused(R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options");
  ExpectRefused(R"({"prompt": ["a", "b"]})", "prompt");
  ExpectRefused(R"({"prompt": [[1], [2]]})", "prompt");
  ExpectRefused(R"({"prompt": [1, -2]})", "prompt[1]");
  ExpectRefused(R"({"prompt": []})", "prompt");
  ExpectRefused(R"({"max_tokens": 3})", "prompt");
  ExpectRefused(R"([1, 2])", "body");
  ExpectRefused(R"({"messages": []})", "messages", Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role", Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user"}]})", "messages[0].content", Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]",
                Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls",
                Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "logprobs", Endpoint::kChat);
  ExpectRefused(R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})", "prompt", Endpoint::kChat);
  ExpectRefused(R"({"prompt": "x", "messages": []})", "messages");
}

TEST(OpenAiRequest, AnotherModelIsNotFound) {
  absl::StatusOr<OpenAiRequest> r = Parse(R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

TEST(OpenAiRequest, TheSharedValidationsFieldsGetOpenAisNames) {
  auto param = [](const std::string& message, Endpoint e) { return OpenAiParam(absl::InvalidArgumentError(message), e); };
  EXPECT_EQ(param("sampling.top_p: must be in (0, 1]", Endpoint::kCompletions), "top_p");
  EXPECT_EQ(param("tokens.ids[3]: 9999 is outside the vocabulary", Endpoint::kCompletions), "prompt");
  EXPECT_EQ(param("input: prompt of 9 tokens exceeds the context", Endpoint::kChat), "messages");
  EXPECT_EQ(param("chat.messages[1].content: not valid UTF-8", Endpoint::kChat), "messages[1].content");
  EXPECT_EQ(param("max_tokens: prompt (5) + max_tokens (2000) exceeds the context", Endpoint::kCompletions), "max_tokens");
  EXPECT_EQ(param("the queue is full: try again", Endpoint::kCompletions), "");
}

TEST(OpenAiRequest, TokenizeAndDetokenizeBodies) {
  absl::StatusOr<v1::GenerateRequest> t = ParseTokenizeRequest(json::parse(R"({"prompt": "hello", "add_special_tokens": true})"), "small");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->text(), "hello");
  t = ParseTokenizeRequest(json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), "small");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->chat().messages_size(), 1);
  EXPECT_FALSE(ParseTokenizeRequest(json::parse(R"({"text": "hello"})"), "small").ok());
  EXPECT_EQ(ParseTokenizeRequest(json::parse(R"({"prompt": "x", "model": "other"})"), "small").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<int32_t>> d = ParseDetokenizeRequest(json::parse(R"({"tokens": [104, 105]})"), "small");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, (std::vector<int32_t>{104, 105}));
  EXPECT_FALSE(ParseDetokenizeRequest(json::parse(R"({"tokens": [1, "x"]})"), "small").ok());
  EXPECT_FALSE(ParseDetokenizeRequest(json::parse(R"({"tokens": -1})"), "small").ok());
}

}  // namespace
}  // namespace q38::http
