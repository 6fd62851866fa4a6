#include "server/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/metrics_https.h"

namespace q38 {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// Bucket upper bounds, in seconds. Per-token intervals get millisecond resolution from 1 ms to
// 40 ms, where decode steps on our targets sit; request-level intervals span from milliseconds to
// the longest requests a deployment allows (an hour).
const Histogram::BucketBoundaries kPerTokenBuckets = {
    0.001, 0.002, 0.003, 0.004,  0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025,
    0.03,  0.035, 0.04,  0.05,   0.06,  0.075, 0.1,   0.15, 0.2,    0.3,   0.5,    1.0,  2.5};
const Histogram::BucketBoundaries kQueueBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,
    2.5,   5.0,    10.0,  20.0, 40.0,  80.0, 160.0, 320.0, 640.0};
const Histogram::BucketBoundaries kFirstTokenBuckets = {
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.15, 0.2,  0.3,   0.5,   0.75,
    1.0,   1.5,  2.0,  3.0,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 320.0};
const Histogram::BucketBoundaries kRequestBuckets = {
    0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,   2.0,   3.0,   5.0,   7.5,    10.0,  15.0,
    20.0, 30.0,  45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0};

bool IsLabelToken(std::string_view v) {
  if (v.empty() || v.size() > 64) return false;
  return std::all_of(v.begin(), v.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::optional<int> IndexOf(std::span<const std::string_view> set, std::string_view v) {
  auto it = std::find(set.begin(), set.end(), v);
  if (it == set.end()) return std::nullopt;
  return static_cast<int>(it - set.begin());
}

// A counter family with one label whose values come from callers: predefined values exist from
// the start; new ones are added on first use up to kMaxExtraLabelValues, then fold into "other".
class ReasonCounter {
 public:
  ReasonCounter(prometheus::Family<Counter>& family, std::string label,
                std::span<const std::string_view> predefined)
      : family_(family), label_(std::move(label)) {
    for (std::string_view v : predefined) {
      by_value_.emplace(v, &family_.Add({{label_, std::string(v)}}));
    }
  }

  void Increment(std::string_view value) {
    if (!IsLabelToken(value)) value = "other";
    Counter* counter;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_value_.find(value);
      if (it == by_value_.end() && extra_ >= kMaxExtraLabelValues && value != "other") {
        value = "other";
        it = by_value_.find(value);
      }
      if (it == by_value_.end()) {
        if (value != "other") ++extra_;
        it = by_value_.emplace(value, &family_.Add({{label_, std::string(value)}})).first;
      }
      counter = it->second;
    }
    counter->Increment();
  }

 private:
  prometheus::Family<Counter>& family_;
  const std::string label_;
  std::mutex mu_;
  std::map<std::string, Counter*, std::less<>> by_value_;
  int extra_ = 0;
};

// A gauge family that is one-hot over a closed set of states, per key (a worker rank) or for a
// single unkeyed entity. Kept as its own Collectable so that a transition is one store under the
// lock that Collect also takes: a scrape never sees a half-made transition.
class OneHotFamily final : public prometheus::Collectable {
 public:
  OneHotFamily(std::string name, std::string help, std::span<const std::string_view> states,
               std::optional<std::string> key_label)
      : name_(std::move(name)),
        help_(std::move(help)),
        states_(states),
        key_label_(std::move(key_label)) {}

  bool Set(int key, std::string_view state) {
    std::optional<int> index = IndexOf(states_, state);
    if (!index.has_value()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    current_[key] = *index;
    return true;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family{name_, help_, prometheus::MetricType::Gauge, {}};
    std::lock_guard<std::mutex> lock(mu_);
    family.metric.reserve(current_.size() * states_.size());
    for (const auto& [key, hot] : current_) {
      for (size_t i = 0; i < states_.size(); ++i) {
        prometheus::ClientMetric m;
        if (key_label_.has_value()) m.label.push_back({*key_label_, absl::StrCat(key)});
        m.label.push_back({"state", std::string(states_[i])});
        m.gauge.value = static_cast<int>(i) == hot ? 1.0 : 0.0;
        family.metric.push_back(std::move(m));
      }
    }
    return {std::move(family)};
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::span<const std::string_view> states_;
  const std::optional<std::string> key_label_;
  mutable std::mutex mu_;
  std::map<int, int> current_;  // key -> index of the hot state
};

Histogram& AddHistogram(prometheus::Registry& registry, const std::string& name,
                        const std::string& help, const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

prometheus::Family<Counter>& CounterFamily(prometheus::Registry& registry, const std::string& name,
                                           const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<Gauge>& GaugeFamily(prometheus::Registry& registry, const std::string& name,
                                       const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

struct ListenAddress {
  std::string host;  // without IPv6 brackets
  int port = 0;
};

// "host:port" with a non-empty host and a decimal port in [0, 65535]. Civetweb would also take a
// bare port (every interface), lists and suffixes ("9400s"); none of those are accepted here.
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", address, "\" is not host:port"));
  }
  std::string_view host(address.data(), colon);
  std::string_view port(address.data() + colon + 1, address.size() - colon - 1);
  bool host_ok = std::none_of(host.begin(), host.end(), [](char c) {
    return c == ',' || absl::ascii_isspace(static_cast<unsigned char>(c));
  });
  if (host.front() == '[' || host.back() == ']') {
    host_ok = host_ok && host.size() > 2 && host.front() == '[' && host.back() == ']';
    host = host.substr(1, host.size() - 2);
  } else {
    host_ok = host_ok && host.find(':') == std::string_view::npos;  // IPv6 needs brackets
  }
  int port_number = -1;
  bool port_ok = !port.empty() && port.size() <= 5 &&
                 std::all_of(port.begin(), port.end(), absl::ascii_isdigit) &&
                 absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &port_number) &&
                 port_number <= 65535;
  if (!host_ok || !port_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", address, "\" is not host:port with a port in [0, 65535]"));
  }
  return ListenAddress{std::string(host), port_number};
}

// Civetweb (1.15, as Debian ships it) polls its listening socket in 2 s quanta and looks at its
// stop flag only between polls, so destroying an Exposer blocks for up to 2 s. A connection to
// the listener ends the poll early. Stop() runs the destructor on a helper thread and connects to
// the listener every few milliseconds until that destructor returns.
class ExposerStopper {
 public:
  // `host` as bound; a wildcard host is reached through loopback.
  ExposerStopper(std::string host, int port) {
    if (host == "0.0.0.0") host = "127.0.0.1";
    if (host == "::") host = "::1";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0) return;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      sockaddr_storage storage{};
      std::memcpy(&storage, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof(storage)));
      targets_.push_back({storage, a->ai_addrlen});
    }
    freeaddrinfo(found);
  }

  void Stop(std::unique_ptr<prometheus::Exposer> exposer) const {
    std::atomic<bool> stopped = false;
    std::thread stopper([&] {
      exposer.reset();
      stopped = true;
    });
    while (!stopped) {
      for (const Target& t : targets_) Poke(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stopper.join();
  }

 private:
  struct Target {
    sockaddr_storage address;
    socklen_t length;
  };

  static void Poke(const Target& t) {
    int fd = socket(t.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    timeval timeout{0, 50'000};  // bounds connect(); the listener is local
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    (void)connect(fd, reinterpret_cast<const sockaddr*>(&t.address), t.length);
    close(fd);
  }

  std::vector<Target> targets_;
};

}  // namespace

struct Metrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<OneHotFamily> worker_state = std::make_shared<OneHotFamily>(
      "q38_worker_state",
      "Worker process state per tensor-parallel rank, one-hot: the series of the current state "
      "is 1, the others 0.",
      kWorkerStates, "rank");
  std::shared_ptr<OneHotFamily> server_state = std::make_shared<OneHotFamily>(
      "q38_server_state",
      "Coordinator state, one-hot: the series of the current state is 1, the others 0.",
      kServerStates, std::nullopt);

  Counter* received = nullptr;
  Counter* outcome_finished = nullptr;
  Counter* outcome_rejected = nullptr;
  Counter* outcome_failed = nullptr;
  Counter* outcome_cancelled = nullptr;
  std::optional<ReasonCounter> finished, rejected, failed, cancelled;

  Histogram* queue = nullptr;
  Histogram* ttft = nullptr;
  Histogram* inter_token = nullptr;
  Histogram* prefill = nullptr;
  Histogram* decode = nullptr;
  Histogram* e2e = nullptr;
  Histogram* tpot = nullptr;

  Counter* prompt_tokens = nullptr;
  Counter* generation_tokens = nullptr;
  Gauge* running = nullptr;
  Gauge* waiting = nullptr;

  prometheus::Family<Gauge>* contract_family = nullptr;
  Gauge* contract = nullptr;
  prometheus::Family<Gauge>*bench_decode = nullptr, *bench_prefill = nullptr, *bench_tpot = nullptr, *bench_ttft = nullptr;
  std::vector<std::pair<prometheus::Family<Gauge>*, Gauge*>> bench_cases;
  Gauge* bench_passed = nullptr;
  Gauge* bench_ended = nullptr;
  std::mutex info_mu;  // contract and benchmark series

  prometheus::Family<Gauge>* worker_memory_family = nullptr;
  std::mutex worker_memory_mu;
  std::map<int, Gauge*> worker_memory;

  std::mutex exposer_mu;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::optional<ExposerStopper> stopper;
  std::unique_ptr<HttpsMetricsServer> https;  // instead of the exposer, with TLS

  ~Impl() {
    if (exposer != nullptr) stopper->Stop(std::move(exposer));  // before the collectables go
  }
};

Metrics::Metrics(const BuildInfo& build) : impl_(std::make_unique<Impl>()) {
  prometheus::Registry& r = *impl_->registry;

  GaugeFamily(r, "q38_build_info",
              "Build and deployment of this server; the value is always 1, the labels carry the "
              "information.")
      .Add({{"version", build.version},
            {"git_commit", build.git_commit},
            {"build_id", build.build_id},
            {"compiler", build.compiler},
            {"device", build.device},
            {"tp", absl::StrCat(build.tp)},
            {"source_fingerprint", build.source_fingerprint}})
      .Set(1);
  impl_->contract_family = &GaugeFamily(
      r, "q38_contract_info",
      "The baseline contract served or last benchmarked under; the value is always 1, the labels "
      "name it.");
  auto per_case = [&](const char* name, const char* help) { return &GaugeFamily(r, name, help); };
  impl_->bench_decode = per_case("q38_benchmark_decode_tokens_per_second",
                                 "Last contract benchmark: decode tokens per second, (output tokens - 1) / (last - first token "
                                 "time), mean over the timed repeats, by case.");
  impl_->bench_prefill = per_case("q38_benchmark_prefill_tokens_per_second",
                                  "Last contract benchmark: prompt tokens / (first token - scheduled), mean over the timed "
                                  "repeats, by case.");
  impl_->bench_tpot = per_case("q38_benchmark_time_per_output_token_seconds",
                               "Last contract benchmark: decode time / (output tokens - 1), mean over the timed repeats, by case.");
  impl_->bench_ttft = per_case("q38_benchmark_time_to_first_token_seconds",
                               "Last contract benchmark: received to first token, mean over the timed repeats, by case.");
  impl_->bench_passed = &GaugeFamily(r, "q38_benchmark_passed",
                                     "1 when the last contract benchmark completed (health, repeatability, reference), else 0.")
                             .Add({});
  impl_->bench_ended = &GaugeFamily(r, "q38_benchmark_last_end_timestamp_seconds",
                                    "Unix time the last contract benchmark ended; 0 before the first.")
                            .Add({});

  impl_->received = &CounterFamily(r, "q38_requests_received_total",
                                   "Generate requests received, before admission.")
                         .Add({});
  auto& outcomes = CounterFamily(
      r, "q38_requests_total",
      "Requests by how they ended: finished (generated to a finish reason), rejected (refused "
      "before admission), failed (server-side error after admission) or cancelled.");
  impl_->outcome_finished = &outcomes.Add({{"outcome", "finished"}});
  impl_->outcome_rejected = &outcomes.Add({{"outcome", "rejected"}});
  impl_->outcome_failed = &outcomes.Add({{"outcome", "failed"}});
  impl_->outcome_cancelled = &outcomes.Add({{"outcome", "cancelled"}});
  impl_->finished.emplace(
      CounterFamily(r, "q38_requests_finished_total",
                    "Requests that finished generating, by finish reason."),
      "finish_reason", kFinishReasons);
  impl_->rejected.emplace(
      CounterFamily(r, "q38_requests_rejected_total",
                    "Requests refused before admission (client error, overload, draining, not "
                    "ready), by reason."),
      "reason", kRejectReasons);
  impl_->failed.emplace(
      CounterFamily(r, "q38_requests_failed_total",
                    "Admitted requests that failed on a server-side error, by reason."),
      "reason", kFailReasons);
  impl_->cancelled.emplace(
      CounterFamily(r, "q38_requests_cancelled_total",
                    "Admitted requests cancelled before they finished, by who cancelled them."),
      "by", kCancelledBy);

  impl_->queue = &AddHistogram(
      r, "q38_request_queue_time_seconds",
      "Time from arrival until the request was first scheduled (excludes prefill), in seconds.",
      kQueueBuckets);
  impl_->ttft = &AddHistogram(r, "q38_time_to_first_token_seconds",
                              "Time from arrival to the first output token, in seconds.",
                              kFirstTokenBuckets);
  impl_->inter_token = &AddHistogram(
      r, "q38_inter_token_latency_seconds",
      "Time between consecutive output tokens of a request, one observation per token, in "
      "seconds.",
      kPerTokenBuckets);
  impl_->prefill = &AddHistogram(
      r, "q38_request_prefill_time_seconds",
      "Time from first scheduling to the first output token (prefill phase), in seconds.",
      kFirstTokenBuckets);
  impl_->decode = &AddHistogram(
      r, "q38_request_decode_time_seconds",
      "Time from the first to the last output token (decode phase), in seconds.",
      kRequestBuckets);
  impl_->e2e = &AddHistogram(r, "q38_e2e_request_latency_seconds",
                             "Time from arrival to the final response, in seconds.",
                             kRequestBuckets);
  impl_->tpot = &AddHistogram(
      r, "q38_request_time_per_output_token_seconds",
      "Mean time per output token after the first, one observation per request, in seconds.",
      kPerTokenBuckets);

  impl_->prompt_tokens =
      &CounterFamily(r, "q38_prompt_tokens_total", "Prompt tokens prefilled.").Add({});
  impl_->generation_tokens =
      &CounterFamily(r, "q38_generation_tokens_total", "Output tokens generated.").Add({});
  impl_->running =
      &GaugeFamily(r, "q38_num_requests_running", "Requests admitted and being generated.").Add({});
  impl_->waiting =
      &GaugeFamily(r, "q38_num_requests_waiting", "Requests queued, waiting to be scheduled.").Add({});
  impl_->worker_memory_family =
      &GaugeFamily(r, "q38_worker_memory_bytes",
                    "Resident host memory of each worker rank process, in bytes; 0 once it is reaped.");

  impl_->server_state->Set(0, "starting");
  for (int rank = 0; rank < build.tp; ++rank) impl_->worker_state->Set(rank, "starting");
}

Metrics::~Metrics() = default;

absl::StatusOr<int> Metrics::Serve(const std::string& address, const std::string& tls_cert, const std::string& tls_key) {
  absl::StatusOr<ListenAddress> parsed = ParseListenAddress(address);
  if (!parsed.ok()) return parsed.status();
  std::lock_guard<std::mutex> lock(impl_->exposer_mu);
  if (impl_->exposer != nullptr || impl_->https != nullptr) {
    return absl::FailedPreconditionError("metrics endpoint is already serving");
  }
  if (!tls_cert.empty()) {
    absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> https =
        HttpsMetricsServer::Start(address, tls_cert, tls_key, [this] { return Render(); });
    if (!https.ok()) return https.status();
    impl_->https = *std::move(https);
    return impl_->https->port();
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb gives each connection a thread until it is closed or idle past the request timeout:
    // enough threads and a short timeout keep a few idle clients from starving the scraper.
    exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "16", "request_timeout_ms", "3000"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.size() != 1 || ports[0] <= 0) {
    return absl::InternalError(
        absl::StrCat("metrics endpoint on ", address, " reports no single listening port"));
  }
  exposer->RegisterCollectable(impl_->registry);
  exposer->RegisterCollectable(impl_->worker_state);
  exposer->RegisterCollectable(impl_->server_state);
  impl_->stopper.emplace(parsed->host, ports[0]);
  impl_->exposer = std::move(exposer);
  return ports[0];
}

std::string Metrics::Render() const {
  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  for (const auto* states : {impl_->worker_state.get(), impl_->server_state.get()}) {
    for (auto& family : states->Collect()) families.push_back(std::move(family));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void Metrics::RequestReceived() { impl_->received->Increment(); }

void Metrics::Rejected(std::string_view reason) {
  impl_->outcome_rejected->Increment();
  impl_->rejected->Increment(reason);
}

void Metrics::Failed(std::string_view reason) {
  impl_->outcome_failed->Increment();
  impl_->failed->Increment(reason);
}

void Metrics::Cancelled(std::string_view by) {
  impl_->outcome_cancelled->Increment();
  impl_->cancelled->Increment(by);
}

void Metrics::Finished(std::string_view finish_reason) {
  impl_->outcome_finished->Increment();
  impl_->finished->Increment(finish_reason);
}

namespace {
inline void ObserveSeconds(Histogram* h, double s) {
  if (std::isfinite(s) && s >= 0) h->Observe(s);
}
}  // namespace

void Metrics::ObserveQueue(double s) { ObserveSeconds(impl_->queue, s); }
void Metrics::ObserveTtft(double s) { ObserveSeconds(impl_->ttft, s); }
void Metrics::ObserveInterToken(double s) { ObserveSeconds(impl_->inter_token, s); }
void Metrics::ObservePrefill(double s) { ObserveSeconds(impl_->prefill, s); }
void Metrics::ObserveDecode(double s) { ObserveSeconds(impl_->decode, s); }
void Metrics::ObserveE2e(double s) { ObserveSeconds(impl_->e2e, s); }
void Metrics::ObserveTpot(double s) { ObserveSeconds(impl_->tpot, s); }

void Metrics::AddPromptTokens(int64_t n) {
  if (n > 0) impl_->prompt_tokens->Increment(static_cast<double>(n));
}

void Metrics::AddGenerationTokens(int64_t n) {
  if (n > 0) impl_->generation_tokens->Increment(static_cast<double>(n));
}

void Metrics::SetRunning(int n) { impl_->running->Set(n); }
void Metrics::SetWaiting(int n) { impl_->waiting->Set(n); }

void Metrics::SetWorkerState(int rank, std::string_view state) {
  if (rank >= 0) impl_->worker_state->Set(rank, state);
}

void Metrics::SetServerState(std::string_view state) { impl_->server_state->Set(0, state); }

void Metrics::SetWorkerMemoryBytes(int rank, double bytes) {
  if (rank < 0 || !std::isfinite(bytes)) return;
  Gauge* gauge;
  {
    std::lock_guard<std::mutex> lock(impl_->worker_memory_mu);
    Gauge*& slot = impl_->worker_memory[rank];
    if (slot == nullptr) slot = &impl_->worker_memory_family->Add({{"rank", absl::StrCat(rank)}});
    gauge = slot;
  }
  gauge->Set(bytes);
}

void Metrics::SetContract(std::string_view name, std::string_view sha256) {
  std::lock_guard<std::mutex> lock(impl_->info_mu);
  if (impl_->contract != nullptr) impl_->contract_family->Remove(impl_->contract);
  impl_->contract = &impl_->contract_family->Add({{"name", std::string(name)}, {"sha256", std::string(sha256)}});
  impl_->contract->Set(1);
}

void Metrics::SetLastBenchmark(const std::vector<BenchmarkCaseGauges>& cases, bool passed, double ended_unix) {
  std::lock_guard<std::mutex> lock(impl_->info_mu);
  for (auto& [family, gauge] : impl_->bench_cases) family->Remove(gauge);
  impl_->bench_cases.clear();
  for (const BenchmarkCaseGauges& c : cases) {
    for (auto [family, value] : {std::pair{impl_->bench_decode, c.decode_tps}, std::pair{impl_->bench_prefill, c.prefill_tps},
                                 std::pair{impl_->bench_tpot, c.tpot_s}, std::pair{impl_->bench_ttft, c.ttft_s}}) {
      Gauge* g = &family->Add({{"case", c.name}});
      g->Set(value);
      impl_->bench_cases.emplace_back(family, g);
    }
  }
  impl_->bench_passed->Set(passed ? 1 : 0);
  impl_->bench_ended->Set(ended_unix);
}

}  // namespace q38
