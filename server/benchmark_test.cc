#include "server/benchmark.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "common/config.h"
#include "tokenizer/fixed_prompt.h"

namespace q38 {
namespace {

using nlohmann::json;

const Tokenizer& Qwen3() {
  static const std::unique_ptr<Tokenizer> tok =
      *Tokenizer::FromDirectory(std::string(std::getenv("Q38_SOURCE_DIR")) + "/tests/fixtures/qwen3-tokenizer");
  return *tok;
}

Contract TinyContract() { return *ParseContract(*ReadFile(std::string(Q38_CONTRACTS_DIR) + "/tiny-cpu.json")); }

// A fake group: greedy requests continue the prompt deterministically (decode 10 ms a token,
// prefill 1 ms a token); sampled ones answer `health_answer` and stop at EOS.
struct FakeGroup {
  std::vector<BenchRequest> seen;
  std::string health_answer = "<think>\nok\n</think>\n\nRESULT=437 and CEDAR-47|8261";
  v1::FinishReason health_finish = v1::FINISH_REASON_EOS;
  std::function<void(int call, std::vector<int32_t>&)> tamper;  // edits the tokens of call N

  absl::StatusOr<BenchResult> operator()(const BenchRequest& r) {
    seen.push_back(r);
    BenchResult out;
    if (r.ignore_eos) {
      for (int i = 0; i < r.max_tokens; ++i) out.tokens.push_back(static_cast<int32_t>((r.prompt.size() * 31 + i * 7) % 1000));
      out.finish_reason = v1::FINISH_REASON_LENGTH;
    } else {
      out.tokens = *Qwen3().Encode(health_answer);
      out.tokens.push_back(151645);  // <|im_end|>
      out.finish_reason = health_finish;
    }
    if (tamper) tamper(static_cast<int>(seen.size()) - 1, out.tokens);
    out.queued_s = 0.002;
    out.prefill_s = r.prompt.size() * 0.001;
    out.decode_s = (out.tokens.size() - 1) * 0.01;
    out.e2e_s = out.queued_s + out.prefill_s + out.decode_s;
    return out;
  }
};

struct Harness {
  FakeGroup group;
  std::vector<std::string> steps;
  int refreshed = 0;
  std::unique_ptr<Benchmark> bench;

  explicit Harness(const Contract& c, int repeats = 2, std::optional<json> reference = std::nullopt, bool do_sample = true) {
    BenchmarkPlan plan{.contract = c, .contract_json = {{"name", c.name}}, .repeats = repeats, .reference = std::move(reference),
                       .tokenizer = &Qwen3(),
                       .generation = {.temperature = 1.0, .top_p = 0.95, .top_k = 20, .do_sample = do_sample},
                       .build = nullptr, .manifest = {{"tp", 4}}};
    bench = std::make_unique<Benchmark>(
        std::move(plan), [this](const BenchRequest& r) { return group(r); },
        [this]() -> absl::StatusOr<json> {
          ++refreshed;
          return json{{"tp", 4}, {"refreshed", true}};
        },
        [this](const std::string& step, const json&) { steps.push_back(step); });
  }
};

TEST(Benchmark, RunsWarmupAndRepeatsAndReportsTheContractMetrics) {
  Harness h(TinyContract());
  ASSERT_TRUE(h.bench->Run().ok()) << h.bench->report()["error"];
  const json& r = h.bench->report();
  EXPECT_EQ(r["schema"], kBenchmarkReportSchema);
  EXPECT_TRUE(r["complete"].get<bool>());
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_EQ(r["manifest"]["refreshed"], true);  // gathered again after the first warmup
  EXPECT_EQ(h.refreshed, 1);
  EXPECT_EQ(h.steps, (std::vector<std::string>{"start", "fixed_64 warmup", "manifests", "fixed_64 run 1", "fixed_64 run 2",
                                               "fixed_64", "done"}));
  ASSERT_EQ(r["cases"].size(), 1u);
  const json& c = r["cases"][0];
  EXPECT_EQ(c["name"], "fixed_64");
  const std::vector<int32_t> prompt = *FixedPrompt(Qwen3(), kFixedPromptSentence, 64);
  EXPECT_EQ(c["prompt_sha256"], HashIds(prompt));
  EXPECT_EQ(h.group.seen[0].prompt, prompt);
  EXPECT_EQ(h.group.seen[0].temperature, 0);  // greedy
  EXPECT_TRUE(h.group.seen[0].ignore_eos);
  EXPECT_EQ(h.group.seen[0].max_tokens, 513);
  ASSERT_EQ(c["runs"].size(), 2u);
  const json& m = c["runs"][1]["metrics"];
  EXPECT_NEAR(m["decode_tps"].get<double>(), 100.0, 1e-9);  // 512 intervals / 5.12 s
  EXPECT_NEAR(m["tpot_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(m["prefill_tps"].get<double>(), 1000.0, 1e-9);  // 64 tokens / 64 ms
  EXPECT_NEAR(m["ttft_s"].get<double>(), 0.066, 1e-12);
  EXPECT_EQ(c["runs"][1]["output_tokens"], 513);
  EXPECT_EQ(c["runs"][1]["output_sha256"], c["warmup"]["output_sha256"]);
  EXPECT_NEAR(c["decode_tps_mean"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(c["summary"]["prefill_tps"]["min"].get<double>(), 1000.0, 1e-9);
  EXPECT_TRUE(c["same_token_hash"].get<bool>());
  EXPECT_TRUE(c["matches_reference"].is_null());
}

TEST(Benchmark, RefusesTooFewRepeatsAndAReferenceMissingACase) {
  EXPECT_EQ(Harness(TinyContract(), 1).bench->Validate().code(), absl::StatusCode::kInvalidArgument);
  Harness h(TinyContract(), 2, json{{"cases", json::array({{{"name", "fixed_8192"}, {"runs", {{{"token_ids", {1}}}}}}})}});
  absl::Status s = h.bench->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "reference: no case fixed_64 with runs[0].token_ids");
  EXPECT_TRUE(h.group.seen.empty());  // rejected before anything ran
  EXPECT_EQ(h.bench->report()["error"], "reference: no case fixed_64 with runs[0].token_ids");
}

TEST(Benchmark, ARunThatDiffersFromTheWarmupFailsNamingTheIndex) {
  Harness h(TinyContract());
  h.group.tamper = [](int call, std::vector<int32_t>& t) {
    if (call == 2) t[5] += 1;  // run 2
  };
  absl::Status s = h.bench->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "token repeatability failed: fixed_64 run 2: token 5 differs from the warmup");
  const json& r = h.bench->report();
  EXPECT_FALSE(r["complete"].get<bool>());
  EXPECT_EQ(r["error"], std::string(s.message()));
  EXPECT_EQ(r["cases"][0]["runs"].size(), 2u);  // the failing run is recorded
  EXPECT_FALSE(r["ended_unix"].is_null());
}

TEST(Benchmark, ADoctoredReferenceIsRejectedAtTheFirstDifferingIndex) {
  Harness good(TinyContract());
  ASSERT_TRUE(good.bench->Run().ok());
  json reference = good.bench->report();
  Harness same(TinyContract(), 2, reference);
  ASSERT_TRUE(same.bench->Run().ok());
  EXPECT_TRUE(same.bench->report()["cases"][0]["matches_reference"].get<bool>());

  const int32_t original = reference["cases"][0]["runs"][0]["token_ids"][17];
  reference["cases"][0]["runs"][0]["token_ids"][17] = original + 1;
  Harness doctored(TinyContract(), 2, reference);
  absl::Status s = doctored.bench->Run();
  EXPECT_EQ(s.message(), absl::StrCat("fixed_64 run 1: token 17 differs from the reference (reference ", original + 1,
                                      ", this run ", original, ")"));
  reference["cases"][0]["runs"][0]["token_ids"].erase(500);
  EXPECT_NE(Harness(TinyContract(), 2, reference).bench->Run().message().find("token 17"), std::string::npos);
}

TEST(Benchmark, AShortRunFails) {
  Harness h(TinyContract());
  h.group.tamper = [](int call, std::vector<int32_t>& t) {
    if (call == 1) t.resize(100);
  };
  EXPECT_EQ(h.bench->Run().message(), "fixed_64 run 1: generated 100 tokens (finish reason length), expected 513 with EOS ignored");
}

Contract WithHealth() {
  Contract c = TinyContract();
  c.benchmark.health_checks = {"arithmetic", "record_copy"};
  return c;
}

TEST(Benchmark, HealthChecksUseTheCheckpointSamplingAndNaturalEos) {
  Harness h(WithHealth());
  ASSERT_TRUE(h.bench->Run().ok()) << h.bench->report()["error"];
  const BenchRequest& arithmetic = h.group.seen[0];
  EXPECT_FALSE(arithmetic.ignore_eos);
  EXPECT_FLOAT_EQ(arithmetic.temperature, 1.0f);
  EXPECT_FLOAT_EQ(arithmetic.top_p, 0.95f);
  EXPECT_EQ(arithmetic.top_k, 20);
  EXPECT_EQ(arithmetic.seed, 0u);
  // The seed's prompt, chat-templated with thinking enabled.
  EXPECT_EQ(arithmetic.prompt,
            *Qwen3().Encode("<|im_start|>user\n请计算 19 × 23。请在最后一行写 RESULT=计算结果。<|im_end|>\n<|im_start|>assistant\n"));
  const json& health = h.bench->report()["health"];
  ASSERT_EQ(health.size(), 2u);
  EXPECT_EQ(health[1]["name"], "record_copy");
  EXPECT_TRUE(health[0]["passed"].get<bool>());
  EXPECT_TRUE(health[1]["passed"].get<bool>());
  EXPECT_EQ(h.steps[1], "health arithmetic");
}

TEST(Benchmark, HealthChecksAreGreedyWhenTheCheckpointDoesNotSample) {
  Harness h(WithHealth(), 2, std::nullopt, /*do_sample=*/false);
  ASSERT_TRUE(h.bench->Run().ok()) << h.bench->report()["error"];
  EXPECT_FLOAT_EQ(h.group.seen[0].temperature, 0.0f);
  EXPECT_FLOAT_EQ(h.group.seen[1].temperature, 0.0f);
}

TEST(Benchmark, AHealthCheckFailsWithoutNaturalEosOrWithTheWrongAnswer) {
  Harness wrong(WithHealth());
  wrong.group.health_answer = "<think>RESULT=437</think>RESULT=436";  // only the text after </think> counts
  EXPECT_EQ(wrong.bench->Run().message(), "health check arithmetic failed: the answer does not match RESULT\\s*=\\s*437\\b");
  EXPECT_FALSE(wrong.bench->report()["health"][0]["passed"].get<bool>());
  EXPECT_TRUE(wrong.bench->report()["cases"].empty());  // timing never ran

  Harness cut(WithHealth());
  cut.group.health_finish = v1::FINISH_REASON_LENGTH;
  EXPECT_EQ(cut.bench->Run().message(), "health check arithmetic failed: finish reason length, not a natural EOS");
}

TEST(Benchmark, LongContextAddsTheNearFullCaseTheMiddleRecordAndTheBoundary) {
  Contract c = TinyContract();
  c.max_context = 700;
  c.benchmark.long_context = true;
  Harness h(c);
  h.group.health_answer = "RESULT=MAPLE-8261";
  ASSERT_TRUE(h.bench->Run().ok()) << h.bench->report()["error"];
  const json& r = h.bench->report();
  ASSERT_EQ(r["cases"].size(), 2u);
  EXPECT_EQ(r["cases"][1]["name"], "fixed_187");  // 700 - 513
  const BenchRequest& middle = h.group.seen[h.group.seen.size() - 2];
  EXPECT_EQ(middle.prompt.size(), 187u);
  const std::string text = Qwen3().Decode(middle.prompt);
  EXPECT_NE(text.find("Archive code: MAPLE-8261."), std::string::npos);
  EXPECT_NE(text.find("Find the archive code and finish with RESULT=<code>."), std::string::npos);
  EXPECT_EQ(r["health"][0]["name"], "long_middle_record");
  const BenchRequest& boundary = h.group.seen.back();
  EXPECT_EQ(boundary.prompt.size(), 699u);
  EXPECT_EQ(boundary.max_tokens, 1);
  EXPECT_EQ(r["exact_context_boundary"]["output_tokens"], 1);
}

TEST(Benchmark, FirstDifference) {
  EXPECT_EQ(FirstDifference({1, 2, 3}, {1, 2, 3}), std::nullopt);
  EXPECT_EQ(FirstDifference({1, 2, 3}, {1, 5, 3}), 1u);
  EXPECT_EQ(FirstDifference({1, 2}, {1, 2, 3}), 2u);
  EXPECT_EQ(FirstDifference({}, {}), std::nullopt);
}

}  // namespace
}  // namespace q38
