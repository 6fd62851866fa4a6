// Streaming text with stop strings, over the real Qwen tokenizer.
#include "server/text_stream.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace q38 {
namespace {

class TextStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::FromDirectory(std::string(std::getenv("Q38_SOURCE_DIR")) + "/tests/fixtures/qwen3-tokenizer");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() { delete tok_; }

  // Feeds the ids of `text` one at a time; returns what the stream gave and whether it stopped.
  static std::pair<std::string, bool> Stream(const std::string& text, std::vector<std::string> stops) {
    TextStream s(*tok_, std::move(stops));
    std::string out;
    const std::vector<int32_t> ids = *tok_->Encode(text);
    for (int32_t id : ids) {
      TextStream::Delta d = s.Add({id});
      out += d.text;
      if (d.stopped) return {out, true};
    }
    return {out + s.Finish(), false};
  }
  static Tokenizer* tok_;
};
Tokenizer* TextStreamTest::tok_ = nullptr;

TEST_F(TextStreamTest, WithoutStopsReproducesTheText) {
  const std::string text = "Grüße, 世界! Emoji 👩‍👩‍👧 and code: for (int i = 0; i < n; ++i) {}";
  EXPECT_EQ(Stream(text, {}), std::make_pair(text, false));
}

TEST_F(TextStreamTest, StopsBeforeTheStopString) {
  EXPECT_EQ(Stream("The answer is 42. END of story", {"END"}), std::make_pair(std::string("The answer is 42. "), true));
  // The earliest of several stop strings wins, even one split across many tokens.
  EXPECT_EQ(Stream("alpha beta gamma delta", {"delta", "ta gam"}), std::make_pair(std::string("alpha be"), true));
  // A stop string made of multi-byte characters.
  EXPECT_EQ(Stream("你好世界，再见", {"世界"}), std::make_pair(std::string("你好"), true));
}

TEST_F(TextStreamTest, HeldBackTextComesOutWhenNoStopMatches) {
  // "EN" could start "END" until the stream ends.
  EXPECT_EQ(Stream("a stream that ends in EN", {"END"}), std::make_pair(std::string("a stream that ends in EN"), false));
}

TEST_F(TextStreamTest, SpecialTokensAreNotRendered) {
  TextStream s(*tok_, {});
  std::string out = s.Add(*tok_->Encode("hi<|im_end|>")).text;
  out += s.Finish();
  EXPECT_EQ(out, "hi");
}

}  // namespace
}  // namespace q38
