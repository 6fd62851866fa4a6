// The server end to end: the real q38-server spawning real q38-worker processes (four CPU ranks
// over Gloo on loopback), driven over gRPC and HTTP like a user would.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/server_harness.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"

namespace q38::e2e {
namespace {

const std::vector<int32_t> kPrompt = {1000, 17, 99, 512, 3, 77, 250, 901, 42, 7, 640, 11, 5, 300, 21, 88, 123, 456, 789, 10, 20, 30};

std::vector<int32_t> RunnerGreedy(const std::vector<int32_t>& prompt, int n, int tp, CpuMath math = CpuMath::kFast) {
  const ModelConfig config = *LoadModelConfig(TinyCheckpoint());
  auto store = *TensorStore::Open(TinyCheckpoint());
  std::vector<int32_t> tokens;
  absl::Status s = RunLocalGroup(config, *store, tp, [&](Model& m) -> absl::Status {
    auto r = GenerateGreedy(m, prompt, n, 8192);
    if (!r.ok()) return r.status();
    if (m.comm().rank() == 0) tokens = r->tokens;
    return absl::OkStatus();
  }, {.cpu_math = math});
  EXPECT_TRUE(s.ok()) << s;
  return tokens;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static Server* server_;
};
Server* ServerTest::server_ = nullptr;

TEST_F(ServerTest, GreedyTokensEqualTheModelRunner) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 24);
  req.set_ignore_eos(true);
  Streamed out = Generate(server_->api(), req);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, RunnerGreedy(kPrompt, 24, 1));
  EXPECT_EQ(out.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(out.last.usage().prompt_tokens(), static_cast<int>(kPrompt.size()));
  EXPECT_EQ(out.last.usage().completion_tokens(), 24);
  EXPECT_GT(out.last.timings().ttft(), 0);
  EXPECT_GT(out.last.timings().tpot(), 0);
  EXPECT_GE(out.messages, 2);  // streamed, not delivered at the end
}

// Log probabilities through the coordinator and the ranks: one per token, the greedy token first
// among its alternatives, and asking for them changes no token.
TEST_F(ServerTest, LogprobsComeWithEveryTokenAndChangeNone) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 12);
  req.set_ignore_eos(true);
  req.set_logprobs(4);
  Streamed out = Generate(server_->api(), req);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, RunnerGreedy(kPrompt, 12, 1));
  ASSERT_EQ(out.logprobs.size(), out.tokens.size());
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const v1::TokenLogprob& lp = out.logprobs[i];
    EXPECT_EQ(lp.id(), out.tokens[i]);
    ASSERT_EQ(lp.top_size(), 4) << i;
    EXPECT_EQ(lp.top(0).id(), lp.id()) << i;
    EXPECT_EQ(lp.top(0).logprob(), lp.logprob()) << i;
    EXPECT_LE(lp.logprob(), 0.0f) << i;
    for (int j = 1; j < 4; ++j) EXPECT_LE(lp.top(j).logprob(), lp.top(j - 1).logprob()) << i;
  }
  req.set_logprobs(21);
  EXPECT_EQ(Generate(server_->api(), req).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, SeededSamplingIsReproducible) {
  ASSERT_TRUE(server_->ready());
  auto sampled = [&](uint64_t seed) {
    v1::GenerateRequest req = TokensRequest(kPrompt, 16);
    req.set_ignore_eos(true);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_top_p(0.95f);
    req.mutable_sampling()->set_top_k(50);
    req.mutable_sampling()->set_seed(seed);
    Streamed s = Generate(server_->api(), req);
    EXPECT_TRUE(s.status.ok()) << s.status.error_message();
    return s.tokens;
  };
  const auto a = sampled(7), b = sampled(7), c = sampled(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), 16u);
}

TEST_F(ServerTest, StopTokenEndsWithStop) {
  ASSERT_TRUE(server_->ready());
  const auto greedy = RunnerGreedy(kPrompt, 8, 1);
  v1::GenerateRequest req = TokensRequest(kPrompt, 8);
  req.set_ignore_eos(true);
  req.add_stop_token_ids(greedy[3]);
  Streamed out = Generate(server_->api(), req);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const size_t first = std::find(greedy.begin(), greedy.end(), greedy[3]) - greedy.begin();
  EXPECT_EQ(out.tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + first + 1));
  EXPECT_EQ(out.last.finish_reason(), v1::FINISH_REASON_STOP);
}

TEST_F(ServerTest, BadInputIsInvalidArgumentNamingTheField) {
  ASSERT_TRUE(server_->ready());
  struct Case {
    std::string what;
    v1::GenerateRequest req;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({"no input", [] { v1::GenerateRequest r; r.set_max_tokens(4); return r; }(), "input"});
  cases.push_back({"empty prompt", TokensRequest({}, 4), "input"});
  cases.push_back({"zero max_tokens", TokensRequest(kPrompt, 0), "max_tokens"});
  cases.push_back({"negative max_tokens", TokensRequest(kPrompt, -3), "max_tokens"});
  cases.push_back({"max_tokens past the context", TokensRequest(kPrompt, 4090), "max_tokens"});
  cases.push_back({"prompt longer than the context", TokensRequest(std::vector<int32_t>(5000, 1), 4), "input"});
  cases.push_back({"id outside the vocabulary", TokensRequest({1, 2, 1024}, 4), "tokens.ids[2]"});
  cases.push_back({"negative id", TokensRequest({-1}, 4), "tokens.ids[0]"});
  cases.push_back({"NaN temperature", [] { auto r = TokensRequest({1}, 4); r.mutable_sampling()->set_temperature(NAN); return r; }(), "sampling.temperature"});
  cases.push_back({"negative temperature", [] { auto r = TokensRequest({1}, 4); r.mutable_sampling()->set_temperature(-1); return r; }(), "sampling.temperature"});
  cases.push_back({"top_p zero", [] { auto r = TokensRequest({1}, 4); r.mutable_sampling()->set_top_p(0); return r; }(), "sampling.top_p"});
  cases.push_back({"top_p above one", [] { auto r = TokensRequest({1}, 4); r.mutable_sampling()->set_top_p(1.5); return r; }(), "sampling.top_p"});
  cases.push_back({"negative top_k", [] { auto r = TokensRequest({1}, 4); r.mutable_sampling()->set_top_k(-2); return r; }(), "sampling.top_k"});
  cases.push_back({"stop id outside the vocabulary", [] { auto r = TokensRequest({1}, 4); r.add_stop_token_ids(5000); return r; }(), "stop_token_ids[0]"});
  cases.push_back({"unknown field", [] {
                     auto r = TokensRequest({1}, 4);
                     r.GetReflection()->MutableUnknownFields(&r)->AddVarint(99, 1);
                     return r;
                   }(), "field 99"});
  for (const Case& c : cases) {
    Streamed out = Generate(server_->api(), c.req);
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what << ": " << out.status.error_message();
    EXPECT_NE(out.status.error_message().find(c.field), std::string::npos) << c.what << ": " << out.status.error_message();
  }
  // The workers survived all of it.
  Streamed ok = Generate(server_->api(), TokensRequest(kPrompt, 2));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

TEST_F(ServerTest, ClientCancelStopsWithinAStep) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 2000);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto reader = server_->api().Generate(&ctx, req);
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The group is free again at once: the cancelled request did not run its 2000 tokens.
  const auto t0 = std::chrono::steady_clock::now();
  Streamed next = Generate(server_->api(), TokensRequest(kPrompt, 2));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(HttpGet(server_->metrics_port(), "/metrics").find("q38_requests_cancelled_total{by=\"client\"} 1"), std::string::npos);
}

TEST_F(ServerTest, DeadlineStopsGeneration) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 2000);
  req.set_ignore_eos(true);
  Streamed out = Generate(server_->api(), req, /*timeout_ms=*/800);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  Streamed next = Generate(server_->api(), TokensRequest(kPrompt, 2));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
}

TEST_F(ServerTest, FullQueueIsResourceExhausted) {
  ASSERT_TRUE(server_->ready());
  // One runs, four wait (queue_size 4); the sixth is refused.
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  v1::GenerateRequest req = TokensRequest(kPrompt, 2000);
  req.set_ignore_eos(true);
  for (int i = 0; i < 5; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(server_->api().Generate(ctxs.back().get(), req));
    if (i == 0) {
      v1::GenerateResponse first;
      ASSERT_TRUE(readers[0]->Read(&first));  // running
    }
  }
  ASSERT_TRUE(WaitForMetric(server_->metrics_port(), "q38_num_requests_waiting", 4, 10000));
  Streamed refused = Generate(server_->api(), TokensRequest(kPrompt, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.status.error_message();
  for (auto& c : ctxs) c->TryCancel();
  for (auto& r : readers) r->Finish();
  // Each handler notices its client's cancel within a poll interval and frees its slot.
  EXPECT_TRUE(WaitForIdle(server_->metrics_port(), 5000));
  Streamed after = Generate(server_->api(), TokensRequest(kPrompt, 2));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

TEST_F(ServerTest, TextInStreamsTextOut) {
  ASSERT_TRUE(server_->ready());
  // The tiny checkpoint's tokenizer is byte-level without merges: one token per byte.
  v1::GenerateRequest req;
  req.set_text("Hello, q38");
  req.set_max_tokens(12);
  req.set_ignore_eos(true);
  Streamed out = Generate(server_->api(), req);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.last.usage().prompt_tokens(), 10);
  const std::vector<int32_t> ids = {'H', 'e', 'l', 'l', 'o', ',', ' ', 'q', '3', '8'};
  EXPECT_EQ(out.tokens, RunnerGreedy(ids, 12, 1));
}

TEST_F(ServerTest, StopStringEndsWithStopAndIsNotReturned) {
  ASSERT_TRUE(server_->ready());
  const std::vector<int32_t> prompt = {'a', 'b', 'c'};
  const auto greedy = RunnerGreedy(prompt, 40, 1);
  // Pick the first generated printable ASCII byte as the stop string: the stream must end right
  // before it (ids below 256 are single bytes in the tiny checkpoint's tokenizer).
  size_t at = 0;
  while (at < greedy.size() && !(greedy[at] > ' ' && greedy[at] < 127)) ++at;
  ASSERT_LT(at, greedy.size()) << "no printable ASCII byte in the greedy continuation";
  v1::GenerateRequest req = TokensRequest(prompt, 40);
  req.set_ignore_eos(true);
  req.add_stop(std::string(1, static_cast<char>(greedy[at])));
  std::string text;
  grpc::ClientContext ctx;
  auto reader = server_->api().Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) text += resp.text();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(resp.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(text.find(static_cast<char>(greedy[at])), std::string::npos) << text;
}

TEST_F(ServerTest, InvalidUtf8TextIsInvalidArgument) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req;
  req.set_text(std::string("bad \xff byte"));
  req.set_max_tokens(2);
  Streamed out = Generate(server_->api(), req);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << out.status.error_message();
  EXPECT_NE(out.status.error_message().find("text"), std::string::npos) << out.status.error_message();
}

TEST_F(ServerTest, ChatWithoutATemplateIsRefused) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req;
  auto* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  req.set_max_tokens(2);
  Streamed out = Generate(server_->api(), req);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << out.status.error_message();
  EXPECT_NE(out.status.error_message().find("chat"), std::string::npos) << out.status.error_message();
}

TEST_F(ServerTest, InfoAndManifestDescribeTheGroup) {
  ASSERT_TRUE(server_->ready());
  grpc::ClientContext c1, c2;
  v1::Info info;
  ASSERT_TRUE(server_->api().GetInfo(&c1, {}, &info).ok());
  EXPECT_EQ(info.tp(), 4);
  EXPECT_EQ(info.vocab_size(), 1024);
  EXPECT_EQ(info.state(), "ready");
  v1::Manifest m;
  ASSERT_TRUE(server_->api().GetManifest(&c2, {}, &m).ok());
  ASSERT_EQ(m.workers_size(), 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(m.workers(r).rank(), r);
    EXPECT_TRUE(Alive(m.workers(r).pid()));
    EXPECT_EQ(m.workers(r).build_id(), m.build_id());
    EXPECT_TRUE(m.workers(r).model().synthetic());
    EXPECT_EQ(m.workers(r).communicator(), "shm-1");
    EXPECT_EQ(std::vector<std::string>(m.workers(r).routes().begin(), m.workers(r).routes().end()),
              std::vector<std::string>{"cpu_fast"});
    EXPECT_EQ(m.workers(r).device().kind(), "cpu");
    EXPECT_EQ(m.workers(r).dtypes().kv_cache(), "F32");
    EXPECT_EQ(m.workers(r).prefill_chunk(), 8192);
    EXPECT_EQ(m.workers(r).max_context(), 4096);
    bool glog = false;
    for (const auto& o : m.workers(r).mapped_objects()) glog |= o.path().find("libglog.so") != std::string::npos && o.sha256().size() == 64;
    EXPECT_TRUE(glog) << "rank " << r << " does not list its mapped libraries";
  }
}

TEST_F(ServerTest, MetricsPassPromtoolAndMove) {
  ASSERT_TRUE(server_->ready());
  ASSERT_TRUE(WaitForIdle(server_->metrics_port(), 5000));
  auto sample = [&](const std::string& name) { return MetricValue(server_->metrics_port(), name); };
  const double before = sample("q38_generation_tokens_total");
  const double itl_before = sample("q38_inter_token_latency_seconds_count");
  v1::GenerateRequest req = TokensRequest(kPrompt, 5);
  req.set_ignore_eos(true);
  ASSERT_TRUE(Generate(server_->api(), req).status.ok());
  EXPECT_EQ(sample("q38_generation_tokens_total"), before + 5);
  EXPECT_EQ(sample("q38_inter_token_latency_seconds_count"), itl_before + 4);  // one per token after the first
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(text.find("q38_worker_memory_bytes{rank=\"3\"}"), std::string::npos);
  EXPECT_EQ(text.find("q38_worker_memory_bytes{rank=\"3\"} 0\n"), std::string::npos) << "rank 3's memory never sampled";
  FILE* p = popen("promtool check metrics > /dev/null 2>&1", "w");
  ASSERT_NE(p, nullptr);
  fwrite(text.data(), 1, text.size(), p);
  EXPECT_EQ(pclose(p), 0) << text;
}

// Lifecycle tests each start their own server.

TEST(ServerLifecycle, SigtermDrainsInFlightThenExitsCleanly) {
  Server s({.drain_timeout_s = 60});
  ASSERT_TRUE(s.ready());
  const auto workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 4u);
  v1::GenerateRequest req = TokensRequest(kPrompt, 20);
  req.set_ignore_eos(true);
  Streamed out;
  std::thread client([&] { out = Generate(s.api(), req); });
  EXPECT_TRUE(WaitForMetric(s.metrics_port(), "q38_num_requests_running", 1, 10000));  // admitted
  EXPECT_EQ(s.SignalAndWait(SIGTERM), 0);
  client.join();
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 20u);  // finished inside the drain deadline
  EXPECT_TRUE(AllGone(workers, 2000));
}

TEST(ServerLifecycle, DrainDeadlineCancelsWhatIsLeft) {
  Server s({.drain_timeout_s = 1});
  ASSERT_TRUE(s.ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 4000 - static_cast<int>(kPrompt.size()));
  req.set_ignore_eos(true);
  Streamed out;
  std::thread client([&] { out = Generate(s.api(), req); });
  EXPECT_TRUE(WaitForMetric(s.metrics_port(), "q38_num_requests_running", 1, 10000));  // admitted
  EXPECT_EQ(s.SignalAndWait(SIGTERM), 0);
  client.join();
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED) << out.status.error_message();
}

TEST(ServerLifecycle, AdminShutdownAndNewRequestsRefused) {
  Server s;
  ASSERT_TRUE(s.ready());
  grpc::ClientContext ctx;
  v1::DrainResponse dr;
  ASSERT_TRUE(s.admin().Drain(&ctx, {}, &dr).ok());
  Streamed refused = Generate(s.api(), TokensRequest(kPrompt, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext ctx2;
  v1::ShutdownResponse sr;
  ASSERT_TRUE(s.admin().Shutdown(&ctx2, {}, &sr).ok());
  EXPECT_EQ(s.SignalAndWait(0 /* just wait */), 0);
}

// Starts a long generation, sends `sig` to one worker once the first token arrived, and returns
// how the stream ended and how long that took after the signal.
std::pair<grpc::StatusCode, std::chrono::steady_clock::duration> SignalWorkerMidStream(Server& s, pid_t worker, int sig) {
  v1::GenerateRequest req = TokensRequest(kPrompt, 3000);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto reader = s.api().Generate(&ctx, req);
  v1::GenerateResponse resp;
  EXPECT_TRUE(reader->Read(&resp));
  const auto t0 = std::chrono::steady_clock::now();
  kill(worker, sig);
  while (reader->Read(&resp)) {
  }
  const grpc::StatusCode code = reader->Finish().error_code();
  return {code, std::chrono::steady_clock::now() - t0};
}

std::string ReadLog(const Server& s) {
  std::ifstream log(s.log_path());
  std::stringstream ss;
  ss << log.rdbuf();
  return ss.str();
}

TEST(ServerLifecycle, WorkerKilledMidStreamIsUnavailableAndLeavesNoOrphans) {
  Server s;
  ASSERT_TRUE(s.ready());
  const auto workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 4u);
  const auto [code, took] = SignalWorkerMidStream(s, workers[2], SIGKILL);
  EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_EQ(s.SignalAndWait(0), 4);  // policy exit: the server goes down non-zero
  EXPECT_TRUE(AllGone(workers, 3000));
  EXPECT_NE(ReadLog(s).find("rank 2"), std::string::npos);
  EXPECT_NE(ReadLog(s).find("killed by signal 9"), std::string::npos);
}

// The other CPU transport and arithmetic, end to end: workers over Gloo in the exact reference
// generate what the in-process runner does in the exact reference, and say so in their manifests.
TEST(ServerLifecycle, GlooWorkersInTheExactReferenceServeTheRunnersTokens) {
  Server s({.extra_flags = {"--cpu_comm=gloo", "--cpu_math=exact"}});
  ASSERT_TRUE(s.ready());
  v1::GenerateRequest req = TokensRequest(kPrompt, 12);
  req.set_ignore_eos(true);
  Streamed out = Generate(s.api(), req);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, RunnerGreedy(kPrompt, 12, 1, CpuMath::kExact));
  grpc::ClientContext c;
  v1::Manifest m;
  ASSERT_TRUE(s.api().GetManifest(&c, {}, &m).ok());
  ASSERT_EQ(m.workers_size(), 4);
  EXPECT_EQ(m.workers(3).communicator().rfind("gloo-", 0), 0u);
  EXPECT_EQ(m.workers(3).routes(0), "cpu_reference");
  EXPECT_EQ(s.SignalAndWait(SIGTERM), 0);
}

TEST(ServerLifecycle, StuckCollectiveFailsTheRequestInsteadOfHanging) {
  Server s({.comm_timeout_ms = 2000});
  ASSERT_TRUE(s.ready());
  const auto workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 4u);
  // A frozen rank: its peers' collectives time out, they fail the request and leave.
  const auto [code, took] = SignalWorkerMidStream(s, workers[3], SIGSTOP);
  EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_EQ(s.SignalAndWait(0), 4);
  kill(workers[3], SIGCONT);
  EXPECT_TRUE(AllGone(workers, 3000));
}

TEST(ServerLifecycle, RestartPolicyBringsTheGroupBack) {
  Server s({.restart_policy = "restart"});
  ASSERT_TRUE(s.ready());
  const auto before = s.WorkerPids();
  kill(before[1], SIGKILL);
  // Serving again with a fresh group.
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    served = Generate(s.api(), TokensRequest(kPrompt, 2)).status.ok();
  }
  EXPECT_TRUE(served);
  EXPECT_TRUE(AllGone(before, 3000));
}

TEST(ServerLifecycle, RefusesRanksBuiltDifferently) {
  // Rank 2 runs a copy of the worker binary with one extra byte: the same code, another build.
  const std::string dir = ::testing::TempDir() + "/other_build";
  std::filesystem::create_directories(dir);
  const std::string copy = dir + "/q38-worker-copy", wrapper = dir + "/worker.sh";
  std::filesystem::copy_file(Q38_WORKER_PATH, copy, std::filesystem::copy_options::overwrite_existing);
  std::ofstream(copy, std::ios::app) << '\n';
  std::ofstream(wrapper) << "#!/bin/sh\ncase \"$1\" in --rank=2) exec " << copy << " \"$@\";; esac\nexec "
                         << Q38_WORKER_PATH << " \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  Server s({.worker_binary = wrapper});
  EXPECT_FALSE(s.ready());
  EXPECT_EQ(s.SignalAndWait(0), 3);
  EXPECT_NE(ReadLog(s).find("refusing to serve: FAILED_PRECONDITION: rank 2 runs build"), std::string::npos) << ReadLog(s);
  std::filesystem::remove_all(dir);
}

TEST(ServerLifecycle, CoordinatorKilledLeavesNoWorkers) {
  Server s;
  ASSERT_TRUE(s.ready());
  const auto workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 4u);
  EXPECT_EQ(s.SignalAndWait(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(AllGone(workers, 5000));
}

}  // namespace
}  // namespace q38::e2e
