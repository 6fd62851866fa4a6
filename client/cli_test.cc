// The command line against an in-process fake of q38.v1.Q38 and grpc's default health service:
// argument errors, streaming, errors, health, manifest JSON and diff, info, bench end to end.
#include "client/cli.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/manifest.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace q38::client {
namespace {

// Streams max_tokens (default 4) ids 100, 101, ... `chunk` per message, then a last message with
// the finish reason, usage and timings. A text prompt gets text "w0 w1 ..."; the text "fail" is
// INVALID_ARGUMENT.
class FakeQ38 final : public v1::Q38::Service {
 public:
  int chunk = 1;
  bool honour_ignore_eos = true;  // false: stop after 2 tokens whatever the request says
  v1::Manifest manifest;
  std::vector<v1::GenerateRequest> seen;
  std::mutex mu;

  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(*req);
    }
    if (req->text() == "fail") return {grpc::StatusCode::INVALID_ARGUMENT, "bad prompt"};
    int n = req->max_tokens() > 0 ? req->max_tokens() : 4;
    if (!honour_ignore_eos) n = std::min(n, 2);
    for (int i = 0; i < n; i += chunk) {
      v1::GenerateResponse msg;
      for (int k = i; k < std::min(n, i + chunk); ++k) {
        msg.add_token_ids(100 + k);
        if (req->has_logprobs()) {  // logprob −0.25, then the asked alternatives at −1, −2, ...
          v1::TokenLogprob* lp = msg.add_logprobs();
          lp->set_id(100 + k);
          lp->set_logprob(-0.25f);
          for (int j = 0; j < req->logprobs(); ++j) {
            v1::TopLogprob* t = lp->add_top();
            t->set_id(j);
            t->set_logprob(-1.0f - j);
          }
        }
        if (req->has_text()) msg.mutable_text()->append("w" + std::to_string(k) + " ");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!writer->Write(msg)) return {grpc::StatusCode::CANCELLED, "client went away"};
    }
    v1::GenerateResponse last;
    last.set_finish_reason(v1::FINISH_REASON_LENGTH);
    last.mutable_usage()->set_prompt_tokens(req->tokens().ids_size());
    last.mutable_usage()->set_completion_tokens(n);
    last.mutable_timings()->set_ttft(0.001);
    last.mutable_timings()->set_tpot(0.001);
    last.mutable_timings()->set_e2e(0.001 * n);
    writer->Write(last);
    return grpc::Status::OK;
  }
  grpc::Status GetManifest(grpc::ServerContext*, const v1::GetManifestRequest*,
                           v1::Manifest* out) override {
    *out = manifest;
    return grpc::Status::OK;
  }
  grpc::Status GetInfo(grpc::ServerContext*, const v1::GetInfoRequest*, v1::Info* out) override {
    out->set_version("0.1-fake");
    out->set_model_type("qwen4_exp");
    out->set_vocab_size(50);
    out->set_tp(2);
    out->add_eos_token_ids(7);
    out->add_eos_token_ids(9);
    out->set_state("serving");
    return grpc::Status::OK;
  }
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.manifest.set_build_id("0123456789abcdef0123");
    fake_.manifest.set_model("tiny");
    fake_.manifest.set_tp(2);
    for (int r = 0; r < 2; ++r) {
      v1::WorkerManifest* w = fake_.manifest.add_workers();
      w->set_rank(r);
      w->set_pid(4000 + r);
      w->mutable_device()->set_kind("cpu");
      w->mutable_model()->set_fingerprint("sha256:fedcba9876543210");
      w->set_communicator("gloo");
    }
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ && port > 0);
    server_->GetHealthCheckService()->SetServingStatus("q38.v1.Q38", true);
    address_ = "127.0.0.1:" + std::to_string(port);
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("q38_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    std::filesystem::remove_all(dir_);
  }

  int Run(const std::vector<std::string>& positional, CliArgs args) {
    out_.str("");
    err_.str("");
    return RunCli(positional, args, out_, err_);
  }
  CliArgs WithServer() {
    CliArgs a;
    a.server = address_;
    a.timeout_s = 5;
    return a;
  }
  static std::string Slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  FakeQ38 fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::filesystem::path dir_;
  std::ostringstream out_, err_;
};

// --------------------------------------------------------------------------- argument errors --

TEST(CliArgsTest, EverySubcommandThatTalksToAServerNeedsServer) {
  for (const char* cmd : {"generate", "health", "manifest", "info", "bench"}) {
    CliArgs a;
    if (std::string(cmd) == "generate") a.tokens = "1,2";
    if (std::string(cmd) == "bench") {
      a.tokens = "1,2";
      a.max_tokens = 4;
    }
    std::ostringstream out, err;
    EXPECT_EQ(RunCli({cmd}, a, out, err), kExitUsage) << cmd;
    EXPECT_NE(err.str().find("--server is required"), std::string::npos) << cmd << ": " << err.str();
  }
}

TEST(CliArgsTest, SubcommandAndFlagMistakesAreUsageErrors) {
  std::ostringstream out, err;
  EXPECT_EQ(RunCli({}, CliArgs(), out, err), kExitUsage);
  EXPECT_NE(err.str().find("missing subcommand"), std::string::npos);
  EXPECT_EQ(RunCli({"frobnicate"}, CliArgs(), out, err), kExitUsage);
  EXPECT_NE(err.str().find("unknown subcommand 'frobnicate'"), std::string::npos);

  CliArgs a;
  a.server = "127.0.0.1:1";
  a.tokens = "1";
  err.str("");
  EXPECT_EQ(RunCli({"health"}, a, out, err), kExitUsage);
  EXPECT_NE(err.str().find("--tokens does not apply"), std::string::npos) << err.str();

  CliArgs g;
  g.server = "127.0.0.1:1";
  g.tokens = "1";
  EXPECT_EQ(RunCli({"generate", "stray"}, g, out, err), kExitUsage);
  g.timeout_s = 0;
  EXPECT_EQ(RunCli({"generate"}, g, out, err), kExitUsage);

  CliArgs b;
  b.server = "127.0.0.1:1";
  b.max_tokens = 4;
  err.str("");
  EXPECT_EQ(RunCli({"bench"}, b, out, err), kExitUsage);  // neither --tokens nor --prompt_len
  EXPECT_NE(err.str().find("exactly one of --tokens and --prompt_len"), std::string::npos);
  b.tokens = "1";
  b.max_tokens.reset();
  EXPECT_EQ(RunCli({"bench"}, b, out, err), kExitUsage);
  b.max_tokens = 4;
  EXPECT_EQ(RunCli({"bench", "report.json"}, b, out, err), kExitUsage);  // FILE without --json

  CliArgs t;
  t.server = "127.0.0.1:1";
  t.max_tokens = 4;
  t.tokens = "1";
  t.tokenizer = "/nonexistent";
  err.str("");
  EXPECT_EQ(RunCli({"bench"}, t, out, err), kExitUsage);
  EXPECT_NE(err.str().find("--tokenizer goes with --prompt_len"), std::string::npos) << err.str();
  t.tokens.reset();
  t.prompt_len = 8;
  t.seed = 1;
  EXPECT_EQ(RunCli({"bench"}, t, out, err), kExitUsage);
  t.seed.reset();
  err.str("");
  EXPECT_EQ(RunCli({"bench"}, t, out, err), 5);  // NOT_FOUND: the tokenizer directory is missing
  EXPECT_NE(err.str().find("/nonexistent"), std::string::npos) << err.str();

  CliArgs d;
  d.diff = true;
  EXPECT_EQ(RunCli({"manifest", "only-one.json"}, d, out, err), kExitUsage);
  d.server = "x:1";
  EXPECT_EQ(RunCli({"manifest", "a.json", "b.json"}, d, out, err), kExitUsage);
}

TEST(CliArgsTest, BuildGenerateRequest) {
  CliArgs a;
  EXPECT_FALSE(BuildGenerateRequest(a).ok());  // neither input
  a.tokens = "1, 2,3";
  a.text = "hi";
  EXPECT_FALSE(BuildGenerateRequest(a).ok());  // both
  a.text.reset();
  a.max_tokens = 8;
  a.temperature = 0.7f;
  a.top_k = 40;
  a.seed = 11;
  a.ignore_eos = true;
  a.stop_token_ids = "5,6";
  absl::StatusOr<v1::GenerateRequest> r = BuildGenerateRequest(a);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens().ids_size(), 3);
  EXPECT_EQ(r->tokens().ids(2), 3);
  EXPECT_EQ(r->max_tokens(), 8);
  EXPECT_TRUE(r->sampling().has_temperature());
  EXPECT_FLOAT_EQ(r->sampling().temperature(), 0.7f);
  EXPECT_EQ(r->sampling().top_k(), 40);
  EXPECT_FALSE(r->sampling().has_top_p());  // not given: left to the server's default
  EXPECT_EQ(r->sampling().seed(), 11u);
  EXPECT_TRUE(r->ignore_eos());
  EXPECT_EQ(r->stop_token_ids_size(), 2);
  EXPECT_FALSE(r->has_logprobs());  // not given: none asked
  a.logprobs = 3;
  EXPECT_EQ(BuildGenerateRequest(a)->logprobs(), 3);
  a.logprobs.reset();

  a.tokens = "1,x";
  absl::StatusOr<v1::GenerateRequest> bad = BuildGenerateRequest(a);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x' is not a token id"), std::string::npos);
  a.tokens = "1,-2";
  EXPECT_FALSE(BuildGenerateRequest(a).ok());
  a.tokens = "";
  EXPECT_FALSE(BuildGenerateRequest(a).ok());
  a.tokens = "1";
  a.max_tokens = 0;
  EXPECT_FALSE(BuildGenerateRequest(a).ok());
}

TEST(CliArgsTest, NormalizeArgvSplitsJsonFile) {
  EXPECT_EQ(NormalizeArgv({"q38", "bench", "--json=out.json", "--json=true", "--json", "-json=r.json"}),
            (std::vector<std::string>{"q38", "bench", "--json", "out.json", "--json=true", "--json",
                                      "--json", "r.json"}));
}

// ------------------------------------------------------------------------------- generate --

TEST_F(CliTest, ClientStreamsEveryMessageToTheCallbackAsItArrives) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(address_);
  ASSERT_TRUE(client.ok());
  v1::GenerateRequest req;
  req.mutable_tokens()->add_ids(1);
  req.set_max_tokens(5);
  fake_.chunk = 2;
  std::vector<int> sizes;
  absl::StatusOr<GenerateResult> r = (*client)->Generate(
      req, std::chrono::seconds(5),
      [&](const v1::GenerateResponse& m) { sizes.push_back(m.token_ids_size()); });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(sizes, (std::vector<int>{2, 2, 1, 0}));
  EXPECT_EQ(r->token_ids, (std::vector<int32_t>{100, 101, 102, 103, 104}));
  ASSERT_EQ(r->arrivals.size(), 3u);
  EXPECT_LE(r->start, r->arrivals[0].at);
  EXPECT_LE(r->arrivals[0].at, r->arrivals[1].at);
  EXPECT_LE(r->arrivals[2].at, r->end);
  EXPECT_EQ(r->finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r->usage.completion_tokens(), 5);
}

TEST_F(CliTest, GeneratePrintsTokenIdsThenTheSummary) {
  CliArgs a = WithServer();
  a.tokens = "1,2,3";
  a.max_tokens = 4;
  ASSERT_EQ(Run({"generate"}, a), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "100 101 102 103\n");
  EXPECT_NE(err_.str().find("finish length | prompt 3 tokens, completion 4 tokens"), std::string::npos)
      << err_.str();
  EXPECT_NE(err_.str().find("tpot 1.00 ms"), std::string::npos) << err_.str();
}

TEST_F(CliTest, GeneratePrintsTextWhenTheServerSendsIt) {
  CliArgs a = WithServer();
  a.text = "hello";
  a.max_tokens = 3;
  ASSERT_EQ(Run({"generate"}, a), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "w0 w1 w2 \n");
}

TEST_F(CliTest, GenerateJson) {
  CliArgs a = WithServer();
  a.text = "hello";
  a.max_tokens = 2;
  a.json = true;
  ASSERT_EQ(Run({"generate"}, a), kExitOk) << err_.str();
  nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["tokens"], nlohmann::json({100, 101}));
  EXPECT_EQ(j["text"], "w0 w1 ");
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_DOUBLE_EQ(j["timings"]["tpot"].get<double>(), 0.001);
  EXPECT_GT(j["client"]["e2e"].get<double>(), 0);
  EXPECT_TRUE(err_.str().empty()) << err_.str();
  EXPECT_TRUE(j["logprobs"].empty());
}

TEST_F(CliTest, GenerateJsonShowsLogprobs) {
  CliArgs a = WithServer();
  a.tokens = "1,2";
  a.max_tokens = 2;
  a.logprobs = 2;
  a.json = true;
  ASSERT_EQ(Run({"generate"}, a), kExitOk) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j["logprobs"].size(), 2u);
  EXPECT_EQ(j["logprobs"][1]["id"], 101);
  EXPECT_EQ(j["logprobs"][1]["logprob"], -0.25);
  EXPECT_EQ(j["logprobs"][1]["top"], nlohmann::json::parse(R"([{"id": 0, "logprob": -1.0}, {"id": 1, "logprob": -2.0}])"));
}

TEST_F(CliTest, GenerateExitsWithTheGrpcStatus) {
  CliArgs a = WithServer();
  a.text = "fail";
  EXPECT_EQ(Run({"generate"}, a), 3);
  EXPECT_NE(err_.str().find("INVALID_ARGUMENT (3): bad prompt"), std::string::npos) << err_.str();

  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  a.text = "hello";
  a.timeout_s = 2;
  EXPECT_EQ(Run({"generate"}, a), 14);  // UNAVAILABLE
  EXPECT_NE(err_.str().find("UNAVAILABLE (14)"), std::string::npos) << err_.str();
}

// -------------------------------------------------------------------------- health, info --

TEST_F(CliTest, HealthReportsLivenessAndReadiness) {
  CliArgs a = WithServer();
  ASSERT_EQ(Run({"health"}, a), kExitOk) << out_.str() << err_.str();
  EXPECT_EQ(out_.str(),
            "liveness   \"\"             SERVING\n"
            "readiness  \"q38.v1.Q38\"   SERVING\n");

  server_->GetHealthCheckService()->SetServingStatus("q38.v1.Q38", false);
  EXPECT_EQ(Run({"health"}, a), kExitFailed);
  EXPECT_EQ(out_.str(),
            "liveness   \"\"             SERVING\n"
            "readiness  \"q38.v1.Q38\"   NOT_SERVING\n");

  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  EXPECT_EQ(Run({"health"}, a), kExitFailed);
  EXPECT_NE(out_.str().find("UNAVAILABLE (14)"), std::string::npos) << out_.str();
}

TEST_F(CliTest, Info) {
  CliArgs a = WithServer();
  ASSERT_EQ(Run({"info"}, a), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("vocab_size"), std::string::npos);
  EXPECT_NE(out_.str().find("7, 9"), std::string::npos) << out_.str();
  a.json = true;
  ASSERT_EQ(Run({"info"}, a), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["vocab_size"], 50);
}

// ------------------------------------------------------------------------------- manifest --

TEST_F(CliTest, ManifestTableJsonAndDiff) {
  CliArgs a = WithServer();
  ASSERT_EQ(Run({"manifest"}, a), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("fedcba987654"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("4001"), std::string::npos);

  a.json = true;
  ASSERT_EQ(Run({"manifest"}, a), kExitOk);
  const std::string first = out_.str();
  std::ofstream(dir_ / "a.json") << first;
  absl::StatusOr<v1::Manifest> parsed = ManifestFromJson(first);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), fake_.manifest.SerializeAsString());

  fake_.manifest.mutable_workers(1)->set_pid(5000);  // ignored by default
  ASSERT_EQ(Run({"manifest"}, a), kExitOk);
  std::ofstream(dir_ / "b.json") << out_.str();
  CliArgs d;
  d.diff = true;
  const std::string fa = (dir_ / "a.json").string(), fb = (dir_ / "b.json").string();
  ASSERT_EQ(Run({"manifest", fa, fb}, d), kExitOk) << out_.str() << err_.str();
  EXPECT_NE(out_.str().find("manifests match (ignoring workers.pid)"), std::string::npos);
  d.ignore_fields = "";
  EXPECT_EQ(Run({"manifest", fa, fb}, d), kExitFailed);
  EXPECT_NE(out_.str().find("workers[rank=1].pid"), std::string::npos) << out_.str();

  fake_.manifest.mutable_workers(0)->set_communicator("nccl");
  fake_.manifest.set_tp(4);
  ASSERT_EQ(Run({"manifest"}, a), kExitOk);
  std::ofstream(dir_ / "b.json") << out_.str();
  d.ignore_fields.reset();
  EXPECT_EQ(Run({"manifest", fa, fb}, d), kExitFailed);
  EXPECT_NE(out_.str().find("tp "), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("workers[rank=0].communicator  \"gloo\"  \"nccl\""), std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("2 fields differ"), std::string::npos) << out_.str();

  std::ofstream(dir_ / "bad.json") << "{\"nope\": 1}";
  EXPECT_EQ(Run({"manifest", fa, (dir_ / "bad.json").string()}, d), 3);
  EXPECT_EQ(Run({"manifest", fa, (dir_ / "missing.json").string()}, d), 5);  // NOT_FOUND
}

// ---------------------------------------------------------------------------------- bench --

TEST_F(CliTest, BenchEndToEnd) {
  fake_.chunk = 2;  // 6 tokens in 3 messages: 4 inter-token latencies per request
  CliArgs a = WithServer();
  a.tokens = "1,2,3";
  a.max_tokens = 6;
  a.requests = 3;
  a.json = true;
  const std::string file = (dir_ / "bench.json").string();
  ASSERT_EQ(Run({"bench", file}, a), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("3 requests (+1 warmup), prompt 3 tokens, 6 generated each"),
            std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("p99"), std::string::npos);
  EXPECT_NE(err_.str().find("report written to"), std::string::npos);

  nlohmann::json j = nlohmann::json::parse(Slurp(file));
  EXPECT_EQ(j["summary"]["ttft_s"]["count"], 3);
  EXPECT_EQ(j["summary"]["itl_s"]["count"], 12);
  EXPECT_EQ(j["summary"]["tpot_s"]["count"], 3);
  EXPECT_GT(j["summary"]["tpot_s"]["p50"].get<double>(), 0);
  EXPECT_GT(j["summary"]["tok_s"]["mean"].get<double>(), 0);
  EXPECT_EQ(j["requests"].size(), 3u);
  EXPECT_EQ(j["requests"][0]["completion_tokens"], 6);
  EXPECT_EQ(j["requests"][0]["messages"], 3);
  EXPECT_TRUE(j["tokens_identical"].get<bool>());
  EXPECT_EQ(j["info"]["vocab_size"], 50);
  EXPECT_EQ(j["manifest"]["workers"].size(), 2u);

  ASSERT_EQ(fake_.seen.size(), 4u);  // one warmup, three timed
  for (const v1::GenerateRequest& r : fake_.seen) {
    EXPECT_TRUE(r.ignore_eos());
    EXPECT_EQ(r.sampling().temperature(), 0);
    EXPECT_EQ(r.max_tokens(), 6);
  }
}

TEST_F(CliTest, BenchSyntheticPromptUsesTheServersVocabularyAndPrintsJson) {
  CliArgs a = WithServer();
  a.prompt_len = 64;
  a.max_tokens = 2;
  a.warmup = 0;
  a.json = true;
  ASSERT_EQ(Run({"bench"}, a), kExitOk) << err_.str();
  nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["config"]["prompt_tokens"], 64);
  ASSERT_EQ(fake_.seen.size(), 1u);
  ASSERT_EQ(fake_.seen[0].tokens().ids_size(), 64);
  for (int32_t id : fake_.seen[0].tokens().ids()) {
    EXPECT_LT(id, 50);
    EXPECT_NE(id, 7);  // EOS ids are avoided
    EXPECT_NE(id, 9);
  }
}

TEST_F(CliTest, BenchFailsWhenARequestStopsEarly) {
  fake_.honour_ignore_eos = false;
  CliArgs a = WithServer();
  a.tokens = "1";
  a.max_tokens = 5;
  EXPECT_EQ(Run({"bench"}, a), 9);  // FAILED_PRECONDITION
  EXPECT_NE(err_.str().find("warmup 1 generated 2 tokens"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace q38::client
