// The benchmark's reference report, which a client sends: every malformed shape is an
// InvalidArgument naming what is wrong, never an exception (one thrown in the Benchmark handler
// ends the server).
#include <cstdlib>

#include <gtest/gtest.h>

#include "server/benchmark.h"

namespace q38 {
namespace {

using nlohmann::json;

absl::StatusOr<std::vector<int32_t>> Tokens(const std::string& reference) {
  return ReferenceTokens(json::parse(reference), "fixed_64");
}

void ExpectInvalid(const std::string& reference, const std::string& message) {
  absl::StatusOr<std::vector<int32_t>> ids;
  ASSERT_NO_THROW(ids = Tokens(reference)) << reference;
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << reference;
  EXPECT_EQ(ids.status().message(), message) << reference;
}

TEST(ReferenceTokens, ReadsTheFirstRunOfTheNamedCase) {
  EXPECT_EQ(*Tokens(R"({"cases":[{"name":"fixed_8"},{"name":"fixed_64","runs":[{"token_ids":[0,7,2147483647]},{"token_ids":[1]}]}]})"),
            (std::vector<int32_t>{0, 7, 2147483647}));
}

TEST(ReferenceTokens, MalformedReportsAreInvalidArgumentNotExceptions) {
  // The denial of service this guards against: a string id threw nlohmann::type_error in the handler.
  ExpectInvalid(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":["x"]}]}]})",
                "reference: case fixed_64 runs[0].token_ids[0]: not a token id (an integer in [0, 2^31)), got string");
  ExpectInvalid(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":[3,-1]}]}]})",
                "reference: case fixed_64 runs[0].token_ids[1]: not a token id (an integer in [0, 2^31)), got -1");
  ExpectInvalid(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":[2147483648]}]}]})",
                "reference: case fixed_64 runs[0].token_ids[0]: not a token id (an integer in [0, 2^31)), got 2147483648");
  ExpectInvalid(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":[1.0]}]}]})",
                "reference: case fixed_64 runs[0].token_ids[0]: not a token id (an integer in [0, 2^31)), got 1.0");
  ExpectInvalid(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":[null]}]}]})",
                "reference: case fixed_64 runs[0].token_ids[0]: not a token id (an integer in [0, 2^31)), got null");
  // A name that is not a string used to throw in Benchmark::Validate (json::value).
  ExpectInvalid(R"({"cases":[{"name":64},{"name":["fixed_64"]}]})", "reference: no case fixed_64 with runs[0].token_ids");
  for (const char* shape : {R"({"cases":[{"name":"fixed_64"}]})", R"({"cases":[{"name":"fixed_64","runs":{}}]})",
                            R"({"cases":[{"name":"fixed_64","runs":[]}]})", R"({"cases":[{"name":"fixed_64","runs":[5]}]})",
                            R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":"1,2"}]}]})", R"({"cases":[7,"x",null]})"}) {
    ExpectInvalid(shape, "reference: no case fixed_64 with runs[0].token_ids");
  }
  for (const char* shape : {R"([])", R"("cases")", R"({"cases":{}})", R"({})"}) {
    ExpectInvalid(shape, "reference: not a benchmark report (no cases list)");
  }
}

// Through the benchmark itself: refused before any request runs, with the same message.
TEST(ReferenceTokens, TheBenchmarkRefusesAMalformedReferenceBeforeRunning) {
  const std::string root = std::getenv("Q38_SOURCE_DIR");
  const Contract contract = *ParseContract(*ReadFile(root + "/deploy/contracts/tiny-cpu.json"));
  const auto tok = *Tokenizer::FromDirectory(root + "/tests/fixtures/qwen3-tokenizer");
  int requests = 0;
  BenchmarkPlan plan{.contract = contract, .repeats = 2,
                     .reference = json::parse(R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":["x"]}]}]})"),
                     .tokenizer = tok.get()};
  Benchmark bench(
      std::move(plan),
      [&](const BenchRequest&) -> absl::StatusOr<BenchResult> {
        ++requests;
        return absl::InternalError("must not run");
      },
      [] { return absl::StatusOr<json>(json::object()); }, nullptr);
  absl::Status s;
  ASSERT_NO_THROW(s = bench.Run());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "reference: case fixed_64 runs[0].token_ids[0]: not a token id (an integer in [0, 2^31)), got string");
  EXPECT_EQ(requests, 0);
}

}  // namespace
}  // namespace q38
