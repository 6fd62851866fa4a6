// Hostile clients and failing workers, through the real q38-server and real q38-worker processes:
// nothing wedges the server, no queued request is lost, a stuck rank is found, cancels arrive,
// drains hold, admin and API-key rules apply, and every failure ends with its own exit code and
// no leftovers. Each test starts the servers it needs.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "tests/e2e/server_harness.h"
#include "tools/checkpoint/checkpoint_generator.h"

namespace q38::e2e {
namespace {

using Seconds = std::chrono::duration<double>;
const std::vector<int32_t> kPrompt = {1000, 17, 99, 512, 3, 77, 250, 901, 42, 7, 640, 11, 5, 300, 21, 88};
const std::string kSmall = std::string(Q38_SOURCE_ROOT) + "/models/small";
const std::string kTinyContract = std::string(Q38_SOURCE_ROOT) + "/deploy/contracts/tiny-cpu.json";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A new directory of this process's own (CTest runs test binaries side by side).
std::string FreshDir(const std::string& what) {
  std::string dir = ::testing::TempDir() + "/" + what + "_XXXXXX";
  return mkdtemp(dir.data());
}

// Polls `done` every 50 ms for up to timeout_ms.
bool Eventually(const std::function<bool()>& done, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 50) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string State(Server& s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::Info info;
  return s.api().GetInfo(&ctx, {}, &info).ok() ? info.state() : "unreachable";
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(Server& s) {
  auto stub = grpc::health::v1::Health::NewStub(s.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("q38.v1.Q38");
  grpc::health::v1::HealthCheckResponse resp;
  stub->Check(&ctx, req, &resp);
  return resp.status();
}

// A long generation that has produced its first token, to be stopped by the test.
struct Streaming {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  grpc::Status Finish() {
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  }
};

std::unique_ptr<Streaming> StartLong(Server& s, int max_tokens = 3000) {
  auto st = std::make_unique<Streaming>();
  v1::GenerateRequest req = TokensRequest(kPrompt, max_tokens);
  req.set_ignore_eos(true);
  st->reader = s.api().Generate(&st->ctx, req);
  v1::GenerateResponse first;
  EXPECT_TRUE(st->reader->Read(&first));
  return st;
}

// The children of `pid` (the server's workers), from /proc.
std::vector<pid_t> Children(pid_t pid) {
  std::vector<pid_t> out;
  std::istringstream in(ReadAll(absl::StrCat("/proc/", pid, "/task/", pid, "/children")));
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

// 1 and 2: a malformed benchmark reference and absurd repeats; 8: idle connections to /metrics.
class ContractServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server({.extra_flags = {"--max_context=1024", "--contract=" + kTinyContract}}); }
  static void TearDownTestSuite() { delete server_; }
  static grpc::Status Benchmark(int32_t repeats, const std::string& reference) {
    v1::BenchmarkRequest req;
    req.set_contract_json(ReadAll(kTinyContract));
    req.set_repeats(repeats);
    req.set_reference_json(reference);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = server_->api().Benchmark(&ctx, req);
    v1::BenchmarkProgress p;
    while (reader->Read(&p)) {
    }
    return reader->Finish();
  }
  static Server* server_;
};
Server* ContractServer::server_ = nullptr;

TEST_F(ContractServer, AMalformedBenchmarkReferenceLeavesTheServerServing) {
  ASSERT_TRUE(server_->ready());
  const grpc::Status s = Benchmark(2, R"({"cases":[{"name":"fixed_64","runs":[{"token_ids":["x"]}]}]})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("reference"), std::string::npos) << s.error_message();
  // The scheduler is free: an ordinary request runs at once.
  Streamed after = Generate(server_->api(), TokensRequest(kPrompt, 2), 10000);
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

TEST_F(ContractServer, BenchmarkRepeatsAreBounded) {
  ASSERT_TRUE(server_->ready());
  const grpc::Status s = Benchmark(2147483647, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("repeats: at most"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Generate(server_->api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

TEST_F(ContractServer, IdleConnectionsDoNotBlockMetrics) {
  ASSERT_TRUE(server_->ready());
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->metrics_port()));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_NE(text.find("q38_num_requests_running"), std::string::npos);
  for (int fd : idle) close(fd);
}

TEST_F(ContractServer, OversizedRequestsAreRefusedBeforeTokenization) {
  ASSERT_TRUE(server_->ready());
  v1::GenerateRequest req;
  req.set_text(std::string(4 << 20, 'a'));
  req.set_max_tokens(2);
  const auto t0 = std::chrono::steady_clock::now();
  Streamed out = Generate(server_->api(), req, 20000);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << out.status.error_message();
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_TRUE(Generate(server_->api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 12: bytes that do not decode as the request, and a stop string that is not UTF-8 (which
// protobuf refuses while parsing), are INVALID_ARGUMENT naming the message, not an empty INTERNAL.
TEST_F(ContractServer, UndecodableRequestsAreInvalidArgument) {
  ASSERT_TRUE(server_->ready());
  grpc::GenericStub generic(server_->channel());
  auto call = [&](const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> l(mu);
      status = std::move(s);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    return status;
  };
  const std::string garbage = "\xff\xff\xff\xff\x0f";
  for (const std::string method : {"/q38.v1.Q38/GetInfo", "/q38.v1.Q38/GetManifest", "/q38.v1.Admin/Drain"}) {
    const grpc::Status s = call(method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("not a valid q38.v1."), std::string::npos) << s.error_message();
  }
  v1::GenerateRequest req = TokensRequest(kPrompt, 2);
  req.add_stop("bad \xff stop");
  Streamed out = Generate(server_->api(), req, 10000);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << out.status.error_message();
  EXPECT_NE(out.status.error_message().find("q38.v1.GenerateRequest"), std::string::npos) << out.status.error_message();
  EXPECT_TRUE(Generate(server_->api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 15: many large requests at once are refused by their length without the coordinator buffering them.
TEST_F(ContractServer, ConcurrentHugeRequestsLeaveTheCoordinatorsMemoryFlat) {
  ASSERT_TRUE(server_->ready());
  auto rss_mb = [&] {
    std::istringstream in(ReadAll(absl::StrCat("/proc/", server_->pid(), "/status")));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    }
    return -1.0;
  };
  const double before = rss_mb();
  v1::GenerateRequest req;
  req.set_text(std::string(32 << 20, 'a'));
  req.set_max_tokens(2);
  std::vector<std::thread> clients;
  std::vector<grpc::StatusCode> codes(16);
  for (int i = 0; i < 16; ++i) clients.emplace_back([&, i] { codes[i] = Generate(server_->api(), req, 30000).status.error_code(); });
  for (auto& c : clients) c.join();
  for (grpc::StatusCode c : codes) EXPECT_EQ(c, grpc::StatusCode::RESOURCE_EXHAUSTED);
  const double after = rss_mb();
  std::cout << "coordinator RSS " << before << " MB before 16 requests of 32 MB, " << after << " MB after\n";
  // 16 x 32 MB = 512 MB offered; without the memory quota the coordinator took 263 MB of it.
  EXPECT_LT(after - before, 96.0);
  EXPECT_TRUE(Generate(server_->api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 3: a worker stopped mid-stream at TP 1 (no peer to notice) is found by the step watchdog.
TEST(Resilience, AHungWorkerAtTp1IsDetectedAndTheGroupRestarted) {
  Server s({.tp = 1, .restart_policy = "restart", .extra_flags = {"--step_timeout_s=2"}});
  ASSERT_TRUE(s.ready());
  const std::vector<pid_t> workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 1u);
  auto st = StartLong(s);
  const auto t0 = std::chrono::steady_clock::now();
  kill(workers[0], SIGSTOP);
  const grpc::Status status = st->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("rank 0 made no progress for 2 s"), std::string::npos) << status.error_message();
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - t0).count(), 8.0);
  EXPECT_TRUE(WaitForMetric(s.metrics_port(), "q38_num_requests_running", 0, 2000));
  EXPECT_TRUE(AllGone(workers, 5000));  // the stopped worker was killed, not left behind
  EXPECT_TRUE(Eventually([&] { return State(s) == "ready"; }, 20000));
  EXPECT_EQ(Health(s), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(Generate(s.api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 4: a cancel sent while rank 0 is stalled arrives when it resumes, not never.
TEST(Resilience, ACancelReachesAWorkerThatStalled) {
  Server s({.tp = 1, .model = kSmall});
  ASSERT_TRUE(s.ready());
  const std::vector<pid_t> workers = s.WorkerPids();
  ASSERT_EQ(workers.size(), 1u);
  auto st = StartLong(s, 3000);
  kill(workers[0], SIGSTOP);
  st->ctx.TryCancel();
  EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::CANCELLED);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // longer than one Cancel call waits
  kill(workers[0], SIGCONT);
  // The cancelled job stops within a step or two of the resume instead of running 3,000 tokens.
  EXPECT_TRUE(WaitForIdle(s.metrics_port(), 3000));
  EXPECT_TRUE(Generate(s.api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 4: a cancel during a long prefill stops it within a block (a mixer or a MoE); the whole prefill
// of this prompt takes tens of seconds on two CPU ranks.
TEST(Resilience, ACancelDuringPrefillStopsWithinABlock) {
  Server s({.tp = 2, .model = kSmall});
  ASSERT_TRUE(s.ready());
  v1::GenerateRequest req = TokensRequest(std::vector<int32_t>(3500, 300), 8);
  grpc::ClientContext ctx;
  auto reader = s.api().Generate(&ctx, req);
  ASSERT_TRUE(WaitForMetric(s.metrics_port(), "q38_num_requests_running", 1, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // inside the prefill
  const auto t0 = std::chrono::steady_clock::now();
  ctx.TryCancel();
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForIdle(s.metrics_port(), 10000));
  const double took = Seconds(std::chrono::steady_clock::now() - t0).count();
  std::cout << "cancelled prefill ended " << took << " s after the cancel\n";
  EXPECT_LT(took, 10.0);
  EXPECT_TRUE(Generate(s.api(), TokensRequest(kPrompt, 2), 10000).status.ok());
}

// 5: a drain holds across a worker restart.
TEST(Resilience, ADrainHoldsAcrossAWorkerRestart) {
  Server s({.tp = 1, .restart_policy = "restart"});
  ASSERT_TRUE(s.ready());
  grpc::ClientContext ctx;
  v1::DrainResponse dr;
  ASSERT_TRUE(s.admin().Drain(&ctx, {}, &dr).ok());
  const std::vector<pid_t> before = s.WorkerPids();
  kill(before[0], SIGKILL);
  ASSERT_TRUE(AllGone(before, 3000));
  // The group comes back (a new worker runs) and the server still says draining.
  auto replaced = [&] {
    const std::vector<pid_t> now = Children(s.pid());
    return !now.empty() && now[0] != before[0];
  };
  EXPECT_TRUE(Eventually([&] { return replaced() && State(s) == "draining"; }, 20000)) << State(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(State(s), "draining");
  EXPECT_EQ(Health(s), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Generate(s.api(), TokensRequest(kPrompt, 2)).status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// 6 and 13: queued requests outlive a worker's death and run on the restarted group; the running
// one fails with a message a client can act on and no internal paths.
TEST(Resilience, QueuedRequestsRunAfterARestart) {
  Server s({.tp = 1, .queue_size = 4, .restart_policy = "restart"});
  ASSERT_TRUE(s.ready());
  const std::vector<pid_t> workers = s.WorkerPids();
  auto running = StartLong(s);
  std::vector<Streamed> queued(2);
  std::vector<std::thread> clients;
  for (auto& q : queued) clients.emplace_back([&] { q = Generate(s.api(), TokensRequest(kPrompt, 3), 60000); });
  ASSERT_TRUE(WaitForMetric(s.metrics_port(), "q38_num_requests_waiting", 2, 10000));
  kill(workers[0], SIGKILL);
  const grpc::Status lost = running->Finish();
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(lost.error_message().find("send it again"), std::string::npos) << lost.error_message();
  EXPECT_EQ(lost.error_message().find('/'), std::string::npos) << lost.error_message();
  for (auto& c : clients) c.join();
  for (const Streamed& q : queued) {
    EXPECT_TRUE(q.status.ok()) << q.status.error_message();
    EXPECT_EQ(q.tokens.size(), 3u);
  }
}

// 7: a worker that dies while the group restarts costs one more restart, not the server.
TEST(Resilience, AFailureDuringARestartIsRetried) {
  Server s({.tp = 1, .restart_policy = "restart", .extra_flags = {"--max_restarts=3"}});
  ASSERT_TRUE(s.ready());
  const std::vector<pid_t> first = s.WorkerPids();
  kill(first[0], SIGKILL);
  // Kill the replacement as soon as it appears, while it starts.
  pid_t second = 0;
  ASSERT_TRUE(Eventually([&] {
    for (pid_t c : Children(s.pid())) {
      if (c != first[0]) second = c;
    }
    return second != 0;
  }, 10000));
  kill(second, SIGKILL);
  EXPECT_TRUE(Eventually([&] { return Generate(s.api(), TokensRequest(kPrompt, 2), 5000).status.ok(); }, 30000));
  EXPECT_TRUE(Alive(s.pid()));
}

// 9: admin calls from IPv6 loopback.
TEST(Resilience, AdminCallsFromIpv6LoopbackAreAllowed) {
  Server s({.tp = 1, .extra_flags = {"--listen=[::1]:0"}});
  if (!s.ready()) GTEST_SKIP() << "no IPv6 loopback here: " << ReadAll(s.log_path());
  auto channel = grpc::CreateChannel(absl::StrCat("[::1]:", s.grpc_port()), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  v1::DrainResponse dr;
  const grpc::Status st = v1::Admin::NewStub(channel)->Drain(&ctx, {}, &dr);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// 11: one exit code per cause, and no run directory left behind.
TEST(Resilience, ABadCheckpointExitsModelRefusedAndLeavesNothing) {
  const std::string dir = FreshDir("bad_checkpoints");
  const std::string corrupt = dir + "/corrupt_safetensors", config = dir + "/bad_config";
  for (const std::string& d : {corrupt, config}) {
    std::filesystem::create_directories(d);
    std::filesystem::copy(TinyCheckpoint(), d, std::filesystem::copy_options::recursive);
  }
  {
    std::fstream f(corrupt + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f << "{\"not\": json";  // inside the header
  }
  std::ofstream(config + "/config.json") << "{\"model_type\": \"qwen4_exp\"";
  for (const std::string& d : {corrupt, config}) {
    Server s({.tp = 2, .model = d});
    EXPECT_FALSE(s.ready());
    EXPECT_EQ(s.SignalAndWait(0), 6) << d << ": " << ReadAll(s.log_path());
    EXPECT_FALSE(std::filesystem::exists(s.run_dir())) << d;
  }
  std::filesystem::remove_all(dir);
}

TEST(Resilience, AKilledCoordinatorsRunDirectoryIsRemovedByTheNextStart) {
  auto own_dirs = [](pid_t pid) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/tmp")) {
      if (e.path().filename().string().rfind("q38-run-", 0) != 0) continue;
      std::ifstream owner(e.path() / "owner");
      pid_t p = 0;
      if (owner >> p && p == pid) out.push_back(e.path());
    }
    return out;
  };
  std::vector<std::string> left;
  {
    Server s({.tp = 1, .extra_flags = {"--run_dir="}});  // the default: a fresh /tmp/q38-run-*
    ASSERT_TRUE(s.ready());
    const pid_t pid = s.pid();
    EXPECT_EQ(s.SignalAndWait(SIGKILL), 128 + SIGKILL);
    left = own_dirs(pid);
    ASSERT_EQ(left.size(), 1u);
  }
  Server next({.tp = 1, .extra_flags = {"--run_dir="}});
  ASSERT_TRUE(next.ready());
  EXPECT_FALSE(std::filesystem::exists(left[0]));
}

// 13: the API key on every public call, health open, admin calls and the full manifest for admins.
TEST(Resilience, ApiAndAdminKeysDecideWhoMayCallWhat) {
  const std::string dir = FreshDir("keys");
  const std::string user_key = "user-key-0123456789", admin_key = "admin-key-0123456789";
  std::ofstream(dir + "/api") << user_key << "\n";
  std::ofstream(dir + "/admin") << admin_key << "\n";
  Server s({.tp = 1, .extra_flags = {"--api_key_file=" + dir + "/api", "--admin_key_file=" + dir + "/admin",
                                     "--loopback_is_admin=false"}});
  ASSERT_TRUE(s.ready()) << ReadAll(s.log_path());
  auto with_key = [](grpc::ClientContext& ctx, const std::string& key) {
    if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
  };
  auto generate = [&](const std::string& key) {
    grpc::ClientContext ctx;
    with_key(ctx, key);
    auto reader = s.api().Generate(&ctx, TokensRequest(kPrompt, 2));
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  };
  EXPECT_EQ(generate("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(generate("wrong-key-0123456789").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(generate(user_key).ok());
  EXPECT_EQ(Health(s), grpc::health::v1::HealthCheckResponse::SERVING);  // no key needed
  auto manifest = [&](const std::string& key, v1::Manifest* m) {
    grpc::ClientContext ctx;
    with_key(ctx, key);
    return s.api().GetManifest(&ctx, {}, m);
  };
  v1::Manifest redacted, full;
  ASSERT_TRUE(manifest(user_key, &redacted).ok());
  ASSERT_TRUE(manifest(admin_key, &full).ok());
  EXPECT_EQ(redacted.workers(0).pid(), 0);
  EXPECT_EQ(redacted.workers(0).executable(), "q38-worker");
  EXPECT_NE(full.workers(0).pid(), 0);
  auto drain = [&](const std::string& key) {
    grpc::ClientContext ctx;
    with_key(ctx, key);
    v1::DrainResponse dr;
    return s.admin().Drain(&ctx, {}, &dr);
  };
  auto benchmark = [&](const std::string& key) {
    grpc::ClientContext ctx;
    with_key(ctx, key);
    v1::BenchmarkRequest req;
    req.set_contract_json(ReadAll(kTinyContract));
    auto reader = s.api().Benchmark(&ctx, req);
    v1::BenchmarkProgress p;
    while (reader->Read(&p)) {
    }
    return reader->Finish();
  };
  EXPECT_EQ(benchmark(user_key).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Past the access check, the admin's call fails on the contract (a TP 4 contract on one rank).
  EXPECT_EQ(benchmark(admin_key).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(drain(user_key).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(drain(admin_key).ok());
  std::filesystem::remove_all(dir);
}

// 13: TLS on the gRPC port and on /metrics; a public address is refused without TLS and a key.
TEST(Resilience, TlsServesGrpcAndMetrics) {
  const std::string dir = FreshDir("tls");
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  ASSERT_EQ(std::system(("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=q38.test -addext "
                         "subjectAltName=DNS:q38.test -keyout " + key + " -out " + cert + " > /dev/null 2>&1").c_str()), 0);
  std::ofstream(dir + "/api") << "user-key-0123456789\n";
  Server s({.tp = 1, .extra_flags = {"--tls_cert=" + cert, "--tls_key=" + key, "--api_key_file=" + dir + "/api",
                                     "--unix_socket=" + dir + "/q38.sock"}});
  ASSERT_TRUE(s.ready()) << ReadAll(s.log_path());
  // The q38 client over TLS: health needs no key, info does.
  const std::string cli = absl::StrCat(Q38_CLI_BIN, " --server=127.0.0.1:", s.grpc_port(), " --tls_ca=", cert,
                                       " --tls_server_name=q38.test --timeout_s=10");
  EXPECT_EQ(std::system((cli + " health > /dev/null").c_str()), 0);
  EXPECT_NE(std::system((cli + " info > /dev/null 2>&1").c_str()), 0);
  EXPECT_EQ(std::system((cli + " --api_key_file=" + dir + "/api info > /dev/null").c_str()), 0);
  // The Unix socket beside it: plaintext, for local health checks.
  EXPECT_EQ(std::system(absl::StrCat(Q38_CLI_BIN, " health --server=unix:", dir, "/q38.sock > /dev/null").c_str()), 0);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadAll(cert);
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("q38.test");
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", s.grpc_port()), grpc::SslCredentials(ssl), args);
  auto api = v1::Q38::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer user-key-0123456789");
  auto reader = api->Generate(&ctx, TokensRequest(kPrompt, 2));
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  const grpc::Status over_tls = reader->Finish();
  EXPECT_TRUE(over_tls.ok()) << over_tls.error_message();
  // Plaintext is refused on the TLS port.
  EXPECT_FALSE(Generate(s.api(), TokensRequest(kPrompt, 2), 3000).status.ok());
  const std::string scrape = dir + "/scrape.txt";
  EXPECT_EQ(std::system(absl::StrCat("curl -s --cacert ", cert, " --resolve q38.test:", s.metrics_port(),
                                     ":127.0.0.1 https://q38.test:", s.metrics_port(), "/metrics -o ", scrape).c_str()), 0);
  EXPECT_NE(ReadAll(scrape).find("q38_num_requests_running"), std::string::npos);
  Server open({.tp = 1, .extra_flags = {"--listen=0.0.0.0:0"}});
  EXPECT_FALSE(open.ready());
  EXPECT_EQ(open.SignalAndWait(0), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace q38::e2e
