#include "client/bench.h"

#include "gtest/gtest.h"

namespace q38::client {
namespace {

using std::chrono::milliseconds;

GenerateResult Stream(const std::vector<std::pair<int, int>>& arrivals_ms_tokens, int end_ms) {
  GenerateResult r;
  r.start = Clock::time_point{} + std::chrono::hours(1);
  int32_t next = 0;
  for (auto [ms, tokens] : arrivals_ms_tokens) {
    r.arrivals.push_back({r.start + milliseconds(ms), tokens});
    for (int i = 0; i < tokens; ++i) r.token_ids.push_back(next++);
  }
  r.end = r.start + milliseconds(end_ms);
  r.finish_reason = v1::FINISH_REASON_LENGTH;
  r.timings.set_ttft(0.008);
  r.timings.set_tpot(0.004);
  return r;
}

TEST(Bench, MeasureRequestAttributesGapsToTheTokensOfAMessage) {
  // 1 token at 10 ms, 2 at 15 ms, 1 at 25 ms; the stream closes at 30 ms.
  absl::StatusOr<RequestMetrics> m = MeasureRequest(Stream({{10, 1}, {15, 2}, {25, 1}}, 30));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->completion_tokens, 4);
  EXPECT_EQ(m->messages, 3);
  EXPECT_NEAR(m->ttft_s, 0.010, 1e-12);
  EXPECT_NEAR(m->e2e_s, 0.030, 1e-12);
  ASSERT_TRUE(m->tpot_s.has_value());
  EXPECT_NEAR(*m->tpot_s, 0.005, 1e-12);  // (25 − 10) / (4 − 1)
  ASSERT_EQ(m->itl_s.size(), 3u);
  EXPECT_NEAR(m->itl_s[0], 0.0025, 1e-12);
  EXPECT_NEAR(m->itl_s[1], 0.0025, 1e-12);
  EXPECT_NEAR(m->itl_s[2], 0.010, 1e-12);
  EXPECT_NEAR(m->tok_s, 4 / 0.030, 1e-9);
}

TEST(Bench, ExtraTokensOfTheFirstMessageHaveNoInterTokenLatency) {
  absl::StatusOr<RequestMetrics> m = MeasureRequest(Stream({{10, 3}, {14, 1}}, 15));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->itl_s.size(), 1u);
  EXPECT_NEAR(m->itl_s[0], 0.004, 1e-12);
  EXPECT_NEAR(*m->tpot_s, 0.004 / 3, 1e-12);
}

TEST(Bench, OneTokenHasNoTpotAndNoTokensIsAnError) {
  absl::StatusOr<RequestMetrics> m = MeasureRequest(Stream({{10, 1}}, 11));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->tpot_s.has_value());
  EXPECT_TRUE(m->itl_s.empty());
  EXPECT_FALSE(MeasureRequest(Stream({}, 5)).ok());
}

TEST(Bench, SummarizeRequestsOverRequestsAndTokens) {
  std::vector<RequestMetrics> requests;
  requests.push_back(*MeasureRequest(Stream({{10, 1}, {15, 2}, {25, 1}}, 30)));
  requests.push_back(*MeasureRequest(Stream({{20, 1}, {24, 1}, {28, 1}, {32, 1}}, 40)));
  BenchSummary s = SummarizeRequests(requests);
  EXPECT_EQ(s.ttft_s.count, 2u);
  EXPECT_NEAR(s.ttft_s.mean, 0.015, 1e-12);
  EXPECT_EQ(s.itl_s.count, 6u);  // 3 + 3 tokens after the first message
  EXPECT_EQ(s.tpot_s.count, 2u);
  EXPECT_NEAR(s.tpot_s.p50, 0.0045, 1e-12);
  EXPECT_NEAR(s.aggregate_tok_s, 8 / 0.070, 1e-9);
  EXPECT_NEAR(s.server_ttft_s.mean, 0.008, 1e-12);
}

TEST(Bench, SyntheticPromptIsDeterministicAndAvoidsExcludedIds) {
  std::vector<int32_t> a = SyntheticPrompt(200, 8, {3, 5}, 7);
  EXPECT_EQ(a, SyntheticPrompt(200, 8, {3, 5}, 7));
  EXPECT_NE(a, SyntheticPrompt(200, 8, {3, 5}, 8));
  ASSERT_EQ(a.size(), 200u);
  for (int32_t id : a) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 8);
    EXPECT_NE(id, 3);
    EXPECT_NE(id, 5);
  }
  EXPECT_TRUE(SyntheticPrompt(4, 1, {0}, 0).empty());  // nothing left to draw
}

}  // namespace
}  // namespace q38::client
