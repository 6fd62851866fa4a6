#include "tests/e2e/server_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/checkpoint_generator.h"

namespace q38::e2e {
namespace {

std::string MakeDir(const std::string& what) {
  std::string dir = ::testing::TempDir() + "/" + what + "_XXXXXX";
  return mkdtemp(dir.data());
}

}  // namespace

std::string ToolPath(const std::string& name, const std::string& built) {
  const char* dir = std::getenv("Q38_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) + "/" + name : built;
}

const std::string& TinyCheckpoint() {
  static const std::string dir = [] {
    std::string d = MakeDir("e2e_tiny");
    absl::Status s = GenerateCheckpoint(TinyModelConfig(), {.seed = 1}, d);
    if (!s.ok()) ADD_FAILURE() << s;
    return d;
  }();
  return dir;
}

Server::Server(const ServerOptions& o) {
  dir_ = MakeDir("e2e_server");
  log_ = dir_ + "/server.log";
  const std::string ready = dir_ + "/ready.json";
  std::vector<std::string> args = {
      o.server_binary,
      "--model=" + (o.model.empty() ? TinyCheckpoint() : o.model),
      absl::StrCat("--tp=", o.tp),
      "--listen=127.0.0.1:0",
      "--metrics=127.0.0.1:0",
      absl::StrCat("--queue_size=", o.queue_size),
      absl::StrCat("--drain_timeout_s=", o.drain_timeout_s),
      "--restart_policy=" + o.restart_policy,
      absl::StrCat("--comm_timeout_ms=", o.comm_timeout_ms),
      "--run_dir=" + dir_ + "/run",
      "--ready_file=" + ready,
      "--startup_timeout_s=60",
  };
  if (!o.worker_binary.empty()) args.push_back("--worker_binary=" + o.worker_binary);
  args.insert(args.end(), o.extra_flags.begin(), o.extra_flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const std::string& kv : o.env) putenv(const_cast<char*>(kv.c_str()));
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Ready once the ready file appears (or the server exits, or 60 s pass).
  for (int i = 0; i < 600 && !std::filesystem::exists(ready); ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::ifstream in(ready);
  if (!in) return;
  nlohmann::json j = nlohmann::json::parse(in);
  grpc_port_ = j["grpc_port"];
  metrics_port_ = j["metrics_port"];
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_), grpc::InsecureChannelCredentials());
  api_ = v1::Q38::NewStub(channel_);
  admin_ = v1::Admin::NewStub(channel_);
}

Server::~Server() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (::testing::Test::HasFailure()) {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::cerr << "---- server log " << log_ << " ----\n" << ss.str() << "---- end ----\n";
  }
  std::filesystem::remove_all(dir_);
}

int Server::SignalAndWait(int sig, int timeout_s) {
  if (pid_ <= 0) return exit_code_;
  kill(pid_, sig);
  for (int i = 0; i < timeout_s * 100; ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -2;  // still running
}

std::vector<pid_t> Server::WorkerPids() {
  grpc::ClientContext ctx;
  v1::Manifest m;
  std::vector<pid_t> pids;
  if (api_->GetManifest(&ctx, {}, &m).ok()) {
    for (const auto& w : m.workers()) pids.push_back(w.pid());
  }
  return pids;
}

Streamed Generate(v1::Q38::Stub& api, const v1::GenerateRequest& req, int timeout_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  Streamed out;
  auto reader = api.Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    ++out.messages;
    out.tokens.insert(out.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    out.text += resp.text();
    out.logprobs.insert(out.logprobs.end(), resp.logprobs().begin(), resp.logprobs().end());
    out.last = resp;
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest TokensRequest(const std::vector<int32_t>& ids, int max_tokens) {
  v1::GenerateRequest r;
  r.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  r.set_max_tokens(max_tokens);
  return r;
}

bool Alive(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return false;
  std::string pid_s, comm, state;
  stat >> pid_s >> comm >> state;
  return state != "Z";
}

bool AllGone(const std::vector<pid_t>& pids, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    bool any = false;
    for (pid_t p : pids) any |= Alive(p);
    if (!any) return true;
    if (waited >= timeout_ms) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? out : out.substr(body + 4);
}

double MetricValue(int port, const std::string& name) {
  const std::string text = HttpGet(port, "/metrics");
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
}

namespace {

// Polls `done` every 20 ms for up to timeout_ms.
bool WaitUntil(const std::function<bool()>& done, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

bool WaitForMetric(int metrics_port, const std::string& name, double value, int timeout_ms) {
  return WaitUntil([&] { return MetricValue(metrics_port, name) == value; }, timeout_ms);
}

bool WaitForIdle(int metrics_port, int timeout_ms) {
  return WaitUntil([&] {
    return MetricValue(metrics_port, "q38_num_requests_running") == 0 &&
           MetricValue(metrics_port, "q38_num_requests_waiting") == 0;
  }, timeout_ms);
}

}  // namespace q38::e2e
