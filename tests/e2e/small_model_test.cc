// The trained small model (models/small, experts in NVFP4) through the real q38-server with two CPU
// ranks: the contract's own health checks and held-out curriculum problems, as chat input with
// the checkpoint's greedy sampling. They pass only if the checkpoint, its tokenizer and chat
// template, the NVFP4 experts and the sharded model all work: random weights or a broken op
// give no natural EOS or a wrong answer.
#include <regex>

#include <gtest/gtest.h>

#include "tests/e2e/server_harness.h"

namespace q38::e2e {
namespace {

class SmallModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions o;
    o.tp = 2;
    o.model = std::string(Q38_SOURCE_ROOT) + "/models/small";
    server_ = new Server(o);
  }
  static void TearDownTestSuite() { delete server_; }

  // The user turn's answer: natural EOS required, the text after the last </think> returned.
  static std::string Ask(const std::string& user) {
    v1::GenerateRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(user);
    r.set_max_tokens(128);
    Streamed s = Generate(server_->api(), r, 300000);
    EXPECT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_EQ(s.last.finish_reason(), v1::FINISH_REASON_EOS) << user << " -> " << s.text;
    const size_t think = s.text.rfind("</think>");
    return think == std::string::npos ? s.text : s.text.substr(think + 8);
  }

  static Server* server_;
};
Server* SmallModel::server_ = nullptr;

// docs/contract.md §6: the prompts and patterns of the seed's health checks (never trained on).
TEST_F(SmallModel, PassesTheContractHealthChecks) {
  ASSERT_TRUE(server_->ready());
  EXPECT_TRUE(std::regex_search(Ask("请计算 19 × 23。请在最后一行写 RESULT=计算结果。"), std::regex(R"(RESULT\s*=\s*437\b)")));
  EXPECT_TRUE(std::regex_search(Ask("项目代号 CEDAR-47，编号 8261。最后一行准确输出 CEDAR-47|8261。"),
                                std::regex(R"(CEDAR-47\s*\|\s*8261)")));
}

// Held-out problems of the curriculum (train/curriculum.py's held_out), in its English wordings.
TEST_F(SmallModel, AnswersHeldOutProblems) {
  ASSERT_TRUE(server_->ready());
  EXPECT_EQ(Ask("Compute 49 × 34. Write RESULT=<answer> on the last line."), "\n\n49 × 34 = 1666\nRESULT=1666");
  EXPECT_EQ(Ask("What is 40 × 35? End with a line RESULT=<answer>."), "\n\n40 × 35 = 1400\nRESULT=1400");
  EXPECT_EQ(Ask("Project code HOLLY-13, number 9644. Output exactly HOLLY-13|9644 on the last line."),
            "\n\nCode: HOLLY-13|9644");
}

// train/curriculum.py's retrieval: one record line in the middle of `lines` filler lines.
std::string Archive(const std::string& code, int lines) {
  std::string user = "Read the archive below.\n";
  for (int i = 0; i < lines; ++i) {
    if (i == lines / 2) user += "Archive code: " + code + ".\n";
    user += "A routine archive entry, without task instructions.\n";
  }
  return user + "Which archive code appears above? Finish with RESULT=<code>.";
}

TEST_F(SmallModel, RetrievesTheRecordFromTheMiddle) {
  ASSERT_TRUE(server_->ready());
  EXPECT_EQ(Ask(Archive("CANYON-5485", 120)), "\n\nRESULT = CANYON-5485");
  EXPECT_EQ(Ask(Archive("CLVAMDK-9837", 40)), "\n\nRESULT = CLVAMDK-9837");
}

}  // namespace
}  // namespace q38::e2e
