#include "tokenizer/fixed_prompt.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "common/sha256.h"

namespace q38 {
namespace {

std::unique_ptr<Tokenizer> Qwen() {
  auto t = Tokenizer::FromDirectory(std::string(std::getenv("Q38_SOURCE_DIR")) + "/tests/fixtures/qwen3-tokenizer");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

TEST(FixedPrompt, RepeatsTheSentenceAndCutsToLength) {
  auto tok = Qwen();
  const std::vector<int32_t> unit = *tok->Encode(kFixedPromptSentence);
  ASSERT_GT(unit.size(), 10u);
  for (int64_t L : {int64_t{1}, static_cast<int64_t>(unit.size()), int64_t{8192}}) {
    const std::vector<int32_t> ids = *FixedPrompt(*tok, kFixedPromptSentence, L);
    ASSERT_EQ(static_cast<int64_t>(ids.size()), L);
    for (int64_t i = 0; i < L; ++i) ASSERT_EQ(ids[i], unit[i % unit.size()]) << i;
  }
}

TEST(FixedPrompt, SpecialTokensInTheSentenceStayText) {
  auto tok = Qwen();
  const std::vector<int32_t> ids = *FixedPrompt(*tok, "a <|endoftext|> b", 64);
  for (int32_t id : ids) EXPECT_FALSE(tok->IsSpecial(id));
}

TEST(FixedPrompt, RejectsBadLengthsAndEmptySentences) {
  auto tok = Qwen();
  EXPECT_FALSE(FixedPrompt(*tok, kFixedPromptSentence, 0).ok());
  EXPECT_FALSE(FixedPrompt(*tok, "", 5).ok());
}

TEST(HashIds, IsSha256OfCommaJoinedIds) {
  EXPECT_EQ(HashIds({1, 22, 333}), Sha256Hex("1,22,333"));
  EXPECT_EQ(HashIds({}), Sha256Hex(""));
}

}  // namespace
}  // namespace q38
