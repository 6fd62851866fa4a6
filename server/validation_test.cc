// Request validation: text fields that are not UTF-8 are refused naming the field; logprobs
// outside [0, 20] likewise.
#include "server/validation.h"

#include <gtest/gtest.h>

namespace q38 {
namespace {

const ModelLimits kLimits{.vocab_size = 1024, .max_context = 4096};

v1::GenerateRequest Tokens() {
  v1::GenerateRequest r;
  r.mutable_tokens()->add_ids(1);
  r.set_max_tokens(4);
  return r;
}

void ExpectInvalid(const v1::GenerateRequest& r, const std::string& message) {
  const absl::Status s = ValidateGenerate(r, kLimits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
}

// Bytes that are not UTF-8 in a stop string could never match the decoded text; the proto3
// string field normally stops them in the parser, but the handler must not rely on that.
TEST(ValidateGenerate, AStopStringThatIsNotUtf8NamesItsIndex) {
  v1::GenerateRequest r = Tokens();
  r.add_stop("fine");
  r.add_stop("bad \xff here");
  ExpectInvalid(r, "stop[1]: not valid UTF-8 (invalid sequence at byte 4)");
  r.set_stop(1, "ends in half a character \xe4\xb8");
  ExpectInvalid(r, "stop[1]: not valid UTF-8 (invalid sequence at byte 25)");
  r.set_stop(1, "完整");
  EXPECT_TRUE(ValidateGenerate(r, kLimits).ok());
}

TEST(ValidateGenerate, ChatAndTextThatAreNotUtf8NameTheField) {
  v1::GenerateRequest r;
  r.set_max_tokens(4);
  auto* system = r.mutable_chat()->add_messages();
  system->set_role("system");
  system->set_content("ok");
  auto* user = r.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("\xc0\xaf");
  ExpectInvalid(r, "chat.messages[1].content: not valid UTF-8 (invalid sequence at byte 0)");
  user->set_content("ok");
  user->set_role("us\xfe");
  ExpectInvalid(r, "chat.messages[1].role: not valid UTF-8 (invalid sequence at byte 2)");
  user->set_role("user");
  EXPECT_TRUE(ValidateGenerate(r, kLimits).ok());
  r.set_text("x\xed\xa0\x80");  // a UTF-16 surrogate
  ExpectInvalid(r, "text: not valid UTF-8 (invalid sequence at byte 1)");
}

TEST(ValidateGenerate, LogprobsOutsideZeroToTwentyAreRefused) {
  v1::GenerateRequest r = Tokens();
  for (int k : {0, 1, 20}) {
    r.set_logprobs(k);
    EXPECT_TRUE(ValidateGenerate(r, kLimits).ok()) << k;
  }
  r.set_logprobs(21);
  ExpectInvalid(r, "logprobs: must be in [0, 20], got 21");
  r.set_logprobs(-1);
  ExpectInvalid(r, "logprobs: must be in [0, 20], got -1");
}

}  // namespace
}  // namespace q38
