// The contract benchmark end to end: the real q38-server with four CPU ranks serving under the
// checked-in tiny-cpu contract, and the real `q38 bench --contract` client saving its report. The
// report must validate against docs/benchmark-report.schema.json, its repeats must be
// token-identical, an ordinary request sent meanwhile must wait for the benchmark, and a doctored
// reference must be rejected at the doctored index.
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_harness.h"

namespace q38::e2e {
namespace {

using nlohmann::json;

const std::string kContract = std::string(Q38_SOURCE_ROOT) + "/deploy/contracts/tiny-cpu.json";

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ContractBenchmark : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new Server({.extra_flags = {"--max_context=1024", "--contract=" + kContract}});
    std::string dir = ::testing::TempDir() + "/e2e_contract_XXXXXX";  // one per process: CTest runs tests in parallel
    dir_ = new std::string(mkdtemp(dir.data()));
  }
  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*dir_);
  }
  // `q38 bench --contract` with `flags`, its report saved to `report`; the CLI's exit status.
  static absl::Status Bench(const std::string& report, std::vector<std::string> flags = {}) {
    std::vector<std::string> cmd = {Q38_CLI_BIN, "bench", absl::StrCat("--server=127.0.0.1:", server_->grpc_port()),
                                    "--contract=" + kContract, "--json", report};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    return RunCommand(cmd).status();
  }
  static json Load(const std::string& path) { return json::parse(*ReadFile(path)); }

  static Server* server_;
  static std::string* dir_;
};
Server* ContractBenchmark::server_ = nullptr;
std::string* ContractBenchmark::dir_ = nullptr;

// One full run (513 tokens a request on four CPU ranks is the slow part, so one run serves every
// check): an ordinary request sent while it runs, then a doctored reference.
TEST_F(ContractBenchmark, FullRunValidatesRepeatsMakesRequestsWaitAndRejectsADoctoredReference) {
  ASSERT_TRUE(server_->ready());
  const std::string report_path = *dir_ + "/report.json";
  absl::Status bench;
  std::thread runner([&] { bench = Bench(report_path); });
  // Once a benchmark request runs, an ordinary one is sent: it must wait for the whole benchmark.
  WaitForMetric(server_->metrics_port(), "q38_num_requests_running", 1, 60000);
  const double sent = NowUnix();
  Streamed ordinary = Generate(server_->api(), TokensRequest({1, 2, 3}, 2), 600000);
  const double answered = NowUnix();
  runner.join();
  ASSERT_TRUE(bench.ok()) << bench;
  ASSERT_TRUE(ordinary.status.ok()) << ordinary.status.error_message();
  EXPECT_FALSE(std::filesystem::exists(report_path + ".tmp"));
  const json report = Load(report_path);
  EXPECT_GT(sent, report["started_unix"].get<double>());
  EXPECT_LT(sent, report["ended_unix"].get<double>());
  EXPECT_GT(answered, report["ended_unix"].get<double>());

  absl::Status valid = RunCommand({"python3", "-c",
                                   "import json, sys, jsonschema; "
                                   "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))",
                                   report_path, std::string(Q38_SOURCE_ROOT) + "/docs/benchmark-report.schema.json"})
                           .status();
  EXPECT_TRUE(valid.ok()) << valid;
  EXPECT_TRUE(report["complete"].get<bool>()) << report["error"];
  EXPECT_EQ(report["contract"]["name"], "tiny-cpu");
  EXPECT_EQ(report["manifest"]["workers"].size(), 4u);
  ASSERT_EQ(report["cases"].size(), 1u);
  const json& c = report["cases"][0];
  EXPECT_EQ(c["name"], "fixed_64");
  ASSERT_EQ(c["runs"].size(), 2u);
  for (const json& run : c["runs"]) {
    EXPECT_EQ(run["output_tokens"], 513);
    EXPECT_EQ(run["token_ids"], c["warmup"]["token_ids"]);
    EXPECT_GT(run["metrics"]["decode_tps"].get<double>(), 0);
    EXPECT_GT(run["metrics"]["prefill_tps"].get<double>(), 0);
  }
  const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("q38_benchmark_decode_tokens_per_second{case=\"fixed_64\"}"), std::string::npos);
  EXPECT_NE(metrics.find("q38_contract_info{name=\"tiny-cpu\""), std::string::npos);
  EXPECT_NE(metrics.find("q38_benchmark_passed 1"), std::string::npos);

  // A doctored reference fails at the doctored index (after the warmup and one run).
  json doctored = report;
  const int32_t original = doctored["cases"][0]["runs"][0]["token_ids"][100];
  doctored["cases"][0]["runs"][0]["token_ids"][100] = original + 1;
  std::ofstream(*dir_ + "/doctored.json") << doctored.dump();
  absl::Status rejected = Bench(*dir_ + "/rejected.json", {"--reference=" + *dir_ + "/doctored.json"});
  EXPECT_NE(rejected.message().find("exited with code 9"), std::string::npos) << rejected;  // FAILED_PRECONDITION
  const json failed = Load(*dir_ + "/rejected.json");
  EXPECT_FALSE(failed["complete"].get<bool>());
  EXPECT_EQ(failed["error"], absl::StrCat("fixed_64 run 1: token 100 differs from the reference (reference ", original + 1,
                                          ", this run ", original, ")"));
}

TEST_F(ContractBenchmark, RefusesOtherContractsNamingEveryFieldAndTooFewRepeats) {
  ASSERT_TRUE(server_->ready());
  std::vector<std::string> cmd = {Q38_CLI_BIN, "bench", absl::StrCat("--server=127.0.0.1:", server_->grpc_port()),
                                  "--contract=" + std::string(Q38_SOURCE_ROOT) + "/deploy/contracts/seed.json"};
  EXPECT_NE(RunCommand(cmd).status().message().find("exited with code 9"), std::string::npos);
  cmd.back() = "--contract=" + kContract;
  cmd.push_back("--repeats=1");
  EXPECT_NE(RunCommand(cmd).status().message().find("exited with code 64"), std::string::npos);
}

TEST(ContractServing, RefusesToStartWhenTheWorkersDeviate) {
  // tiny-cpu wants a context of 1024; this server gives its workers 4096.
  Server s({.tp = 2, .extra_flags = {"--contract=" + kContract}});
  EXPECT_FALSE(s.ready());
  EXPECT_EQ(s.SignalAndWait(0), 5);
  const std::string log = ReadFile(s.log_path()).value_or("");
  EXPECT_NE(log.find("the workers deviate from contract tiny-cpu in 4 fields: tp: contract 4, the server has 2; "
                     "workers: contract ranks 0..3, manifest has ranks [0, 1]; "
                     "workers[rank=0].max_context: contract 1024, rank 0 has 4096"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace q38::e2e
