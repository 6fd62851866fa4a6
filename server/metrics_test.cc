#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace q38 {
namespace {

using Labels = std::map<std::string, std::string>;

// Non-empty pieces of `text` between `sep`s (absl::string_view is not std::string_view here).
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    size_t at = text.find(sep);
    std::string_view piece = text.substr(0, at);
    if (!piece.empty()) out.push_back(piece);
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

// A parsed text exposition: every sample by name and label set, and every family's type.
struct Exposition {
  std::map<std::pair<std::string, Labels>, double> samples;
  std::map<std::string, std::string> types;

  std::optional<double> Get(const std::string& name, const Labels& labels = {}) const {
    auto it = samples.find({name, labels});
    if (it == samples.end()) return std::nullopt;
    return it->second;
  }

  // Value of a sample that must exist; a missing one fails the test and reads as NaN.
  double At(const std::string& name, const Labels& labels = {}) const {
    std::optional<double> v = Get(name, labels);
    EXPECT_TRUE(v.has_value()) << "no sample " << name << " " << ::testing::PrintToString(labels);
    return v.value_or(std::numeric_limits<double>::quiet_NaN());
  }

  // Cumulative bucket counts of an unlabelled histogram, by upper bound.
  std::map<double, double> Buckets(const std::string& name) const {
    std::map<double, double> out;
    for (const auto& [key, value] : samples) {
      if (key.first != name + "_bucket") continue;
      out[std::strtod(key.second.at("le").c_str(), nullptr)] = value;
    }
    return out;
  }

  std::set<std::string> FamiliesWithPrefix(const std::string& prefix) const {
    std::set<std::string> out;
    for (const auto& [name, type] : types) {
      if (name.rfind(prefix, 0) == 0) out.insert(name);
    }
    return out;
  }
};

// Parses the subset of the text format prometheus-cpp writes: `# TYPE` lines, and samples
// `name{k="v",...} value` with \\, \" and \n escapes in label values. Fails the test on anything
// else.
Exposition Parse(const std::string& text) {
  Exposition e;
  for (std::string_view line : Split(text, '\n')) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::vector<std::string_view> parts = Split(line.substr(7), ' ');
      EXPECT_EQ(parts.size(), 2u) << line;
      if (parts.size() == 2) e.types[std::string(parts[0])] = std::string(parts[1]);
      continue;
    }
    if (line.rfind('#', 0) == 0) continue;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    std::string name(line.substr(0, i));
    Labels labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        EXPECT_NE(eq, std::string_view::npos) << line;
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          ADD_FAILURE() << "bad label in: " << line;
          return e;
        }
        std::string key(line.substr(i, eq - i));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            value.push_back(line[j]);
          }
        }
        labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    EXPECT_TRUE(i < line.size() && line[i] == ' ') << line;
    std::string value(line.substr(i + 1));
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    EXPECT_TRUE(end != value.c_str() && *end == '\0') << line;
    EXPECT_TRUE(e.samples.emplace(std::make_pair(name, labels), v).second)
        << "duplicate sample: " << line;
  }
  return e;
}

BuildInfo TestBuild(int tp = 2) {
  return BuildInfo{"0.1.0", "0123abcd", "build-42", "gcc 12.2.0", "cpu", tp, "fp-7"};
}

// Expects exactly one of `states` to be 1 (the `hot` one) and the rest 0, for one label set.
void ExpectOneHot(const Exposition& e, const std::string& family, const Labels& key,
                  std::span<const std::string_view> states, std::string_view hot) {
  for (std::string_view s : states) {
    Labels labels = key;
    labels["state"] = std::string(s);
    EXPECT_EQ(e.At(family, labels), s == hot ? 1.0 : 0.0)
        << family << " " << ::testing::PrintToString(labels) << " with " << hot << " hot";
  }
}

struct HttpResponse {
  std::string status_line;
  std::string headers;
  std::string body;
};

// A minimal HTTP/1.0 client: one GET, read to EOF, 2 s timeouts.
std::optional<HttpResponse> HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) raw.append(buffer, n);
    }
  }
  close(fd);
  size_t line_end = raw.find("\r\n");
  size_t head_end = raw.find("\r\n\r\n");
  if (line_end == std::string::npos || head_end == std::string::npos) return std::nullopt;
  return HttpResponse{raw.substr(0, line_end), raw.substr(line_end + 2, head_end - line_end - 2),
                      raw.substr(head_end + 4)};
}

std::string FindPromtool() {
  if (const char* env = std::getenv("PROMTOOL"); env != nullptr && *env != '\0') {
    return access(env, X_OK) == 0 ? env : "";
  }
  std::vector<std::string_view> dirs;
  if (const char* path = std::getenv("PATH"); path != nullptr) dirs = Split(path, ':');
  dirs.push_back("/usr/bin");
  for (std::string_view dir : dirs) {
    std::string candidate = std::string(dir) + "/promtool";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct PromtoolResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together; empty when the exposition is clean
};

// Runs `promtool check metrics` with `text` on stdin.
PromtoolResult RunPromtool(const std::string& promtool, const std::string& text) {
  signal(SIGPIPE, SIG_IGN);  // promtool may exit before reading all of stdin
  std::string out_path = absl::StrCat(::testing::TempDir(), "/metrics_test_promtool_", getpid());
  std::string command = absl::StrCat("'", promtool, "' check metrics >'", out_path, "' 2>&1");
  PromtoolResult result;
  FILE* pipe = popen(command.c_str(), "w");
  if (pipe == nullptr) {
    result.output = "popen failed: " + command;
    return result;
  }
  fwrite(text.data(), 1, text.size(), pipe);
  int status = pclose(pipe);
  result.exit_code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  result.output = ss.str();
  std::remove(out_path.c_str());
  return result;
}

const char* const kHistograms[] = {
    "q38_request_queue_time_seconds",   "q38_time_to_first_token_seconds",
    "q38_inter_token_latency_seconds",  "q38_request_prefill_time_seconds",
    "q38_request_decode_time_seconds",  "q38_e2e_request_latency_seconds",
    "q38_request_time_per_output_token_seconds"};

// Calls every method once so that every family has samples.
void Exercise(Metrics& m) {
  m.RequestReceived();
  m.Rejected("queue_full");
  m.Failed("worker_died");
  m.Cancelled("client");
  m.Finished("eos");
  m.ObserveQueue(0.002);
  m.ObserveTtft(0.12);
  m.ObserveInterToken(0.011);
  m.ObservePrefill(0.1);
  m.ObserveDecode(1.5);
  m.ObserveE2e(1.7);
  m.ObserveTpot(0.012);
  m.AddPromptTokens(100);
  m.AddGenerationTokens(20);
  m.SetRunning(1);
  m.SetWaiting(3);
  m.SetWorkerState(0, "busy");
  m.SetServerState("ready");
  m.SetWorkerMemoryBytes(0, 12.5e9);
  m.SetWorkerMemoryBytes(1, 12.25e9);
  m.SetContract("tiny-cpu", "abc");
  m.SetLastBenchmark({{"fixed_64", 100, 1000, 0.01, 0.05}}, true, 1.7e9);
}

TEST(Metrics, BuildInfoIsOneWithItsLabels) {
  Metrics m(TestBuild(4));
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.types["q38_build_info"], "gauge");
  EXPECT_EQ(e.At("q38_build_info", {{"version", "0.1.0"},
                                    {"git_commit", "0123abcd"},
                                    {"build_id", "build-42"},
                                    {"compiler", "gcc 12.2.0"},
                                    {"device", "cpu"},
                                    {"tp", "4"},
                                    {"source_fingerprint", "fp-7"}}),
            1.0);
}

TEST(Metrics, ContractInfoNamesTheCurrentContractOnly) {
  Metrics m(TestBuild());
  m.SetContract("seed", "aa");
  m.SetContract("tiny-cpu", "bb");
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.types["q38_contract_info"], "gauge");
  EXPECT_EQ(e.At("q38_contract_info", {{"name", "tiny-cpu"}, {"sha256", "bb"}}), 1.0);
  EXPECT_EQ(e.samples.count({"q38_contract_info", Labels{{"name", "seed"}, {"sha256", "aa"}}}), 0u);
}

TEST(Metrics, LastBenchmarkReplacesThePreviousOne) {
  Metrics m(TestBuild());
  EXPECT_EQ(Parse(m.Render()).At("q38_benchmark_last_end_timestamp_seconds", {}), 0.0);
  m.SetLastBenchmark({{"fixed_8192", 97.7, 6950.2, 0.01023, 1.2}, {"fixed_261631", 74.0, 5170.0, 0.0135, 50.6}}, true, 1.7e9);
  m.SetLastBenchmark({{"fixed_64", 120.5, 900.0, 0.0083, 0.07}}, false, 1.8e9);
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_benchmark_decode_tokens_per_second", {{"case", "fixed_64"}}), 120.5);
  EXPECT_EQ(e.At("q38_benchmark_prefill_tokens_per_second", {{"case", "fixed_64"}}), 900.0);
  EXPECT_EQ(e.At("q38_benchmark_time_per_output_token_seconds", {{"case", "fixed_64"}}), 0.0083);
  EXPECT_EQ(e.At("q38_benchmark_time_to_first_token_seconds", {{"case", "fixed_64"}}), 0.07);
  EXPECT_EQ(e.samples.count({"q38_benchmark_decode_tokens_per_second", Labels{{"case", "fixed_8192"}}}), 0u);
  EXPECT_EQ(e.At("q38_benchmark_passed", {}), 0.0);
  EXPECT_EQ(e.At("q38_benchmark_last_end_timestamp_seconds", {}), 1.8e9);
}

TEST(Metrics, EveryFamilyHasItsTypeAndHelp) {
  Metrics m(TestBuild());
  Exercise(m);
  std::string text = m.Render();
  Exposition e = Parse(text);
  const std::map<std::string, std::string> expected = {
      {"q38_build_info", "gauge"},
      {"q38_requests_received_total", "counter"},
      {"q38_requests_total", "counter"},
      {"q38_requests_finished_total", "counter"},
      {"q38_requests_rejected_total", "counter"},
      {"q38_requests_failed_total", "counter"},
      {"q38_requests_cancelled_total", "counter"},
      {"q38_prompt_tokens_total", "counter"},
      {"q38_generation_tokens_total", "counter"},
      {"q38_num_requests_running", "gauge"},
      {"q38_num_requests_waiting", "gauge"},
      {"q38_worker_state", "gauge"},
      {"q38_server_state", "gauge"},
      {"q38_worker_memory_bytes", "gauge"},
      {"q38_contract_info", "gauge"},
      {"q38_benchmark_decode_tokens_per_second", "gauge"},
      {"q38_benchmark_prefill_tokens_per_second", "gauge"},
      {"q38_benchmark_time_per_output_token_seconds", "gauge"},
      {"q38_benchmark_time_to_first_token_seconds", "gauge"},
      {"q38_benchmark_passed", "gauge"},
      {"q38_benchmark_last_end_timestamp_seconds", "gauge"},
      {"q38_request_queue_time_seconds", "histogram"},
      {"q38_time_to_first_token_seconds", "histogram"},
      {"q38_inter_token_latency_seconds", "histogram"},
      {"q38_request_prefill_time_seconds", "histogram"},
      {"q38_request_decode_time_seconds", "histogram"},
      {"q38_e2e_request_latency_seconds", "histogram"},
      {"q38_request_time_per_output_token_seconds", "histogram"},
  };
  std::map<std::string, std::string> actual;
  for (const std::string& name : e.FamiliesWithPrefix("q38_")) actual[name] = e.types[name];
  EXPECT_EQ(actual, expected);
  for (const auto& [name, type] : expected) {
    size_t help = text.find("# HELP " + name + " ");
    ASSERT_NE(help, std::string::npos) << name;
    EXPECT_GT(text.find('\n', help) - help, ("# HELP " + name + " ").size() + 10) << name;
  }
}

TEST(Metrics, InterTokenHistogramCountsSumsAndBuckets) {
  Metrics m(TestBuild());
  m.ObserveInterToken(0.004);
  m.ObserveInterToken(0.02);
  m.ObserveInterToken(0.5);
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_inter_token_latency_seconds_count"), 3);
  EXPECT_NEAR(e.At("q38_inter_token_latency_seconds_sum"), 0.524, 1e-12);
  std::map<double, double> buckets = e.Buckets("q38_inter_token_latency_seconds");
  ASSERT_GE(buckets.size(), 20u) << "per-token buckets need millisecond resolution";
  // Upper bounds are inclusive; counts are cumulative.
  EXPECT_EQ(buckets.at(0.001), 0);
  EXPECT_EQ(buckets.at(0.004), 1);
  EXPECT_EQ(buckets.at(0.005), 1);
  EXPECT_EQ(buckets.at(0.02), 2);
  EXPECT_EQ(buckets.at(0.3), 2);
  EXPECT_EQ(buckets.at(0.5), 3);
  EXPECT_EQ(buckets.at(std::numeric_limits<double>::infinity()), 3);
  double previous = 0;
  for (const auto& [le, count] : buckets) {
    EXPECT_GE(count, previous) << "le=" << le;
    previous = count;
  }
}

TEST(Metrics, EachLatencyFeedsOnlyItsOwnHistogram) {
  Metrics m(TestBuild());
  void (Metrics::*observe[])(double) = {&Metrics::ObserveQueue,   &Metrics::ObserveTtft,
                                        &Metrics::ObserveInterToken, &Metrics::ObservePrefill,
                                        &Metrics::ObserveDecode,  &Metrics::ObserveE2e,
                                        &Metrics::ObserveTpot};
  static_assert(std::size(observe) == std::size(kHistograms));
  for (size_t i = 0; i < std::size(observe); ++i) {
    for (size_t k = 0; k <= i; ++k) (m.*observe[i])(0.25 * (i + 1));
  }
  Exposition e = Parse(m.Render());
  for (size_t i = 0; i < std::size(kHistograms); ++i) {
    std::string name = kHistograms[i];
    EXPECT_EQ(e.At(name + "_count"), i + 1) << name;
    EXPECT_NEAR(e.At(name + "_sum"), 0.25 * (i + 1) * (i + 1), 1e-9) << name;
    EXPECT_EQ(e.At(name + "_bucket", {{"le", "+Inf"}}), i + 1) << name;
    EXPECT_GE(e.Buckets(name).size(), 15u) << name;
  }
}

TEST(Metrics, DropsNegativeAndNonFiniteLatencies) {
  Metrics m(TestBuild());
  m.ObserveE2e(-1.0);
  m.ObserveE2e(std::numeric_limits<double>::quiet_NaN());
  m.ObserveE2e(std::numeric_limits<double>::infinity());
  m.ObserveE2e(0.0);
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_e2e_request_latency_seconds_count"), 1);
  EXPECT_EQ(e.At("q38_e2e_request_latency_seconds_sum"), 0);
}

TEST(Metrics, TokenCountersAccumulate) {
  Metrics m(TestBuild());
  m.AddPromptTokens(100);
  m.AddPromptTokens(28);
  m.AddPromptTokens(-5);  // ignored: counters only go up
  for (int i = 0; i < 7; ++i) m.AddGenerationTokens(1);
  m.AddGenerationTokens(0);
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_prompt_tokens_total"), 128);
  EXPECT_EQ(e.At("q38_generation_tokens_total"), 7);
}

TEST(Metrics, OutcomesAreKeptApart) {
  Metrics m(TestBuild());
  for (int i = 0; i < 7; ++i) m.RequestReceived();
  m.Finished("eos");
  m.Finished("eos");
  m.Finished("length");
  m.Rejected("draining");
  m.Failed("collective_timeout");
  m.Cancelled("drain");
  m.Cancelled("deadline");
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_requests_received_total"), 7);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "finished"}}), 3);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "rejected"}}), 1);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "failed"}}), 1);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "cancelled"}}), 2);

  EXPECT_EQ(e.At("q38_requests_finished_total", {{"finish_reason", "eos"}}), 2);
  EXPECT_EQ(e.At("q38_requests_finished_total", {{"finish_reason", "length"}}), 1);
  EXPECT_EQ(e.At("q38_requests_finished_total", {{"finish_reason", "stop"}}), 0);
  EXPECT_EQ(e.At("q38_requests_rejected_total", {{"reason", "draining"}}), 1);
  EXPECT_EQ(e.At("q38_requests_rejected_total", {{"reason", "queue_full"}}), 0);
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "collective_timeout"}}), 1);
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "worker_died"}}), 0);
  EXPECT_EQ(e.At("q38_requests_cancelled_total", {{"by", "drain"}}), 1);
  EXPECT_EQ(e.At("q38_requests_cancelled_total", {{"by", "deadline"}}), 1);
  EXPECT_EQ(e.At("q38_requests_cancelled_total", {{"by", "client"}}), 0);
}

TEST(Metrics, PredefinedReasonsStartAtZero) {
  Metrics m(TestBuild());
  Exposition e = Parse(m.Render());
  for (std::string_view r : kRejectReasons) {
    EXPECT_EQ(e.At("q38_requests_rejected_total", {{"reason", std::string(r)}}), 0);
  }
  for (std::string_view r : kFailReasons) {
    EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", std::string(r)}}), 0);
  }
  for (std::string_view r : kCancelledBy) {
    EXPECT_EQ(e.At("q38_requests_cancelled_total", {{"by", std::string(r)}}), 0);
  }
  for (std::string_view r : kFinishReasons) {
    EXPECT_EQ(e.At("q38_requests_finished_total", {{"finish_reason", std::string(r)}}), 0);
  }
  for (const char* outcome : {"finished", "rejected", "failed", "cancelled"}) {
    EXPECT_EQ(e.At("q38_requests_total", {{"outcome", outcome}}), 0);
  }
}

TEST(Metrics, NewReasonsAreAddedAndOddOnesFoldIntoOther) {
  Metrics m(TestBuild());
  m.Failed("worker_unavailable");
  m.Failed("CUDA error: 700");
  m.Failed("");
  m.Failed(std::string(65, 'x'));
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "worker_unavailable"}}), 1);
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "other"}}), 3);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "failed"}}), 4);

  // Past the cap, new values fold into "other"; values already seen keep their own series.
  for (int i = 1; i < kMaxExtraLabelValues; ++i) m.Failed(absl::StrCat("extra_", i));
  m.Failed("one_too_many");
  m.Failed("worker_unavailable");
  e = Parse(m.Render());
  EXPECT_FALSE(e.Get("q38_requests_failed_total", {{"reason", "one_too_many"}}).has_value());
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "other"}}), 4);
  EXPECT_EQ(e.At("q38_requests_failed_total", {{"reason", "worker_unavailable"}}), 2);
  EXPECT_EQ(e.At("q38_requests_failed_total",
                 {{"reason", absl::StrCat("extra_", kMaxExtraLabelValues - 1)}}),
            1);
  // Other families have their own budget.
  m.Rejected("prompt_too_long");
  e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_requests_rejected_total", {{"reason", "prompt_too_long"}}), 1);
}

TEST(Metrics, RunningWaitingAndMemoryGauges) {
  Metrics m(TestBuild());
  m.SetRunning(3);
  m.SetWaiting(5);
  m.SetWaiting(2);
  m.SetWorkerMemoryBytes(0, 1.5e10);
  m.SetWorkerMemoryBytes(1, 2e10);
  m.SetWorkerMemoryBytes(1, 1e10);
  m.SetWorkerMemoryBytes(-1, 1e10);  // ignored
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_num_requests_running"), 3);
  EXPECT_EQ(e.At("q38_num_requests_waiting"), 2);
  EXPECT_EQ(e.At("q38_worker_memory_bytes", {{"rank", "0"}}), 1.5e10);
  EXPECT_EQ(e.At("q38_worker_memory_bytes", {{"rank", "1"}}), 1e10);
  EXPECT_FALSE(e.Get("q38_worker_memory_bytes", {{"rank", "-1"}}).has_value());
}

TEST(Metrics, WorkerStateIsOneHotPerRank) {
  Metrics m(TestBuild(/*tp=*/2));
  Exposition e = Parse(m.Render());
  ExpectOneHot(e, "q38_worker_state", {{"rank", "0"}}, kWorkerStates, "starting");
  ExpectOneHot(e, "q38_worker_state", {{"rank", "1"}}, kWorkerStates, "starting");

  m.SetWorkerState(1, "ready");
  m.SetWorkerState(0, "ready");
  m.SetWorkerState(0, "busy");
  m.SetWorkerState(3, "dead");         // a rank beyond tp gets its own series
  m.SetWorkerState(1, "exploded");     // not a state: ignored
  m.SetWorkerState(-1, "ready");       // ignored
  e = Parse(m.Render());
  ExpectOneHot(e, "q38_worker_state", {{"rank", "0"}}, kWorkerStates, "busy");
  ExpectOneHot(e, "q38_worker_state", {{"rank", "1"}}, kWorkerStates, "ready");
  ExpectOneHot(e, "q38_worker_state", {{"rank", "3"}}, kWorkerStates, "dead");
  EXPECT_FALSE(e.Get("q38_worker_state", {{"rank", "2"}, {"state", "starting"}}).has_value());
  EXPECT_FALSE(e.Get("q38_worker_state", {{"rank", "1"}, {"state", "exploded"}}).has_value());
  EXPECT_FALSE(e.Get("q38_worker_state", {{"rank", "-1"}, {"state", "ready"}}).has_value());
}

TEST(Metrics, ServerStateIsOneHot) {
  Metrics m(TestBuild());
  ExpectOneHot(Parse(m.Render()), "q38_server_state", {}, kServerStates, "starting");
  for (std::string_view state : kServerStates) {
    m.SetServerState(state);
    ExpectOneHot(Parse(m.Render()), "q38_server_state", {}, kServerStates, state);
  }
  m.SetServerState("on_fire");  // not a state: ignored
  ExpectOneHot(Parse(m.Render()), "q38_server_state", {}, kServerStates, "stopping");
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  Metrics m(TestBuild(/*tp=*/4));
  constexpr int kThreads = 4;
  constexpr int kTokens = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kTokens; ++i) {
        m.ObserveInterToken(0.01);
        m.AddGenerationTokens(1);
        if (i % 100 == 0) {
          m.SetWorkerState(t, i % 200 == 0 ? "busy" : "ready");
          m.Finished(i % 300 == 0 ? "stop" : "eos");
        }
      }
      m.SetWorkerState(t, "ready");
    });
  }
  std::thread scraper([&m] {
    for (int i = 0; i < 20; ++i) {
      Exposition e = Parse(m.Render());
      for (int rank = 0; rank < kThreads; ++rank) {
        double hot = 0;
        for (std::string_view s : kWorkerStates) {
          hot += e.At("q38_worker_state",
                      {{"rank", absl::StrCat(rank)}, {"state", std::string(s)}});
        }
        EXPECT_EQ(hot, 1) << "rank " << rank << " mid-run";
      }
    }
  });
  for (auto& t : threads) t.join();
  scraper.join();
  Exposition e = Parse(m.Render());
  EXPECT_EQ(e.At("q38_inter_token_latency_seconds_count"), kThreads * kTokens);
  EXPECT_NEAR(e.At("q38_inter_token_latency_seconds_sum"), kThreads * kTokens * 0.01, 1e-6);
  EXPECT_EQ(e.At("q38_generation_tokens_total"), kThreads * kTokens);
  EXPECT_EQ(e.At("q38_requests_total", {{"outcome", "finished"}}), kThreads * kTokens / 100);
  for (int rank = 0; rank < kThreads; ++rank) {
    ExpectOneHot(e, "q38_worker_state", {{"rank", absl::StrCat(rank)}}, kWorkerStates, "ready");
  }
}

TEST(MetricsServe, ScrapeReturnsTheRenderedFamilies) {
  Metrics m(TestBuild());
  Exercise(m);
  absl::StatusOr<int> port = m.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);

  std::optional<HttpResponse> response = HttpGet(*port, "/metrics");
  ASSERT_TRUE(response.has_value()) << "no HTTP response from 127.0.0.1:" << *port;
  EXPECT_NE(response->status_line.find(" 200"), std::string::npos) << response->status_line;
  EXPECT_NE(response->headers.find("text/plain"), std::string::npos) << response->headers;

  Exposition scraped = Parse(response->body);
  Exposition rendered = Parse(m.Render());
  EXPECT_EQ(scraped.FamiliesWithPrefix("q38_"), rendered.FamiliesWithPrefix("q38_"));
  EXPECT_EQ(scraped.FamiliesWithPrefix("q38_").size(), 28u);
  for (const auto& [key, value] : rendered.samples) {
    EXPECT_EQ(scraped.Get(key.first, key.second), value)
        << key.first << " " << ::testing::PrintToString(key.second);
  }
  std::optional<HttpResponse> missing = HttpGet(*port, "/nothing");
  ASSERT_TRUE(missing.has_value());
  EXPECT_NE(missing->status_line.find(" 404"), std::string::npos) << missing->status_line;
}

TEST(MetricsServe, StopsPromptlyAndFreesThePort) {
  auto m = std::make_unique<Metrics>(TestBuild());
  absl::StatusOr<int> port = m->Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(HttpGet(*port, "/metrics").has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the listener is polling again
  auto start = std::chrono::steady_clock::now();
  m.reset();
  auto stop_time = std::chrono::steady_clock::now() - start;
  EXPECT_LT(stop_time, std::chrono::milliseconds(500));
  EXPECT_FALSE(HttpGet(*port, "/metrics").has_value()) << "port " << *port << " still served";
}

TEST(MetricsServe, RefusesMalformedAddresses) {
  Metrics m(TestBuild());
  for (const char* address :
       {"", "9400", ":9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:9400s",
        "127.0.0.1:-1", "127.0.0.1:1,127.0.0.1:2", "::1:0", "[]:0", "[::1:0", "127.0.0.1 :0"}) {
    absl::StatusOr<int> port = m.Serve(address);
    EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << address << "\": " << port.status();
  }
}

TEST(MetricsServe, SecondServeIsRefusedAndABusyPortIsUnavailable) {
  Metrics first(TestBuild());
  absl::StatusOr<int> port = first.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(first.Serve("127.0.0.1:0").status().code(), absl::StatusCode::kFailedPrecondition);

  Metrics second(TestBuild());
  absl::StatusOr<int> clash = second.Serve(absl::StrCat("127.0.0.1:", *port));
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable) << clash.status();
  EXPECT_NE(clash.status().message().find(absl::StrCat(*port)), std::string::npos)
      << clash.status();
}

TEST(MetricsPromtool, ScrapeAndRenderPassCheckMetrics) {
  std::string promtool = FindPromtool();
  ASSERT_FALSE(promtool.empty())
      << "promtool not found (looked at $PROMTOOL, $PATH and /usr/bin); install the Debian "
         "package `prometheus` or set PROMTOOL. This test does not skip.";

  // Label values that need escaping must still give a valid exposition.
  BuildInfo build = TestBuild();
  build.compiler = "g++ \"12.2\" \\ (Debian)";
  build.build_id = "line\nbreak";
  Metrics m(build);
  Exercise(m);
  m.Failed("worker_unavailable");
  m.Failed("not a token");
  absl::StatusOr<int> port = m.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::optional<HttpResponse> response = HttpGet(*port, "/metrics");
  ASSERT_TRUE(response.has_value());
  ASSERT_FALSE(response->body.empty());
  EXPECT_EQ(Parse(response->body).At("q38_build_info", {{"version", "0.1.0"},
                                                        {"git_commit", "0123abcd"},
                                                        {"build_id", "line\nbreak"},
                                                        {"compiler", "g++ \"12.2\" \\ (Debian)"},
                                                        {"source_fingerprint", "fp-7"},
                                                        {"device", "cpu"},
                                                        {"tp", "2"}}),
            1.0);

  for (const auto& [what, text] : {std::pair<const char*, std::string>{"scrape", response->body},
                                   {"Render()", m.Render()}}) {
    PromtoolResult result = RunPromtool(promtool, text);
    EXPECT_EQ(result.exit_code, 0) << what << ": " << promtool << " check metrics:\n"
                                   << result.output << "\n--- input ---\n" << text;
    EXPECT_EQ(result.output, "") << what;
  }

  // The check itself must catch a bad exposition, or passing proves nothing.
  PromtoolResult bad = RunPromtool(promtool, "# TYPE q38_bad counter\nq38_bad 1\n");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
}

}  // namespace
}  // namespace q38
