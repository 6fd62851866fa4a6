// The coordinator's Prometheus metrics (docs/design.md §9, docs/operations.md "Monitoring"): request
// latency histograms, token counters, requests by outcome with rejected, failed and cancelled
// kept apart, running/waiting gauges, one-hot worker and server state, per-rank device memory and
// a build-info gauge. Every family is prefixed `q38_` and otherwise named as vLLM names it, so
// existing dashboards and AIPerf read it unchanged.
//
// Every method is thread-safe. The per-token path (ObserveInterToken, AddGenerationTokens) does no
// allocation and no lookup: a bucket search, a short lock held by the histogram and atomic adds.
// The reason-labelled counters take one mutex and one map lookup per call (once per request).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace q38 {

struct BuildInfo {
  std::string version;
  std::string git_commit;
  std::string build_id;
  std::string compiler;
  std::string device;
  int tp = 0;  // tensor-parallel ranks; the worker-state gauge starts with ranks [0, tp) "starting"
  std::string source_fingerprint;  // the build manifest's, when run from a bundle
};

// One case of the last contract benchmark (means over its timed repeats).
struct BenchmarkCaseGauges {
  std::string name;  // fixed_8192
  double decode_tps = 0;
  double prefill_tps = 0;
  double tpot_s = 0;
  double ttft_s = 0;
};

// The closed sets the one-hot gauges range over, in exposition order.
inline constexpr std::string_view kWorkerStates[] = {"starting", "ready", "busy", "dead",
                                                     "stopped"};
inline constexpr std::string_view kServerStates[] = {"starting", "loading", "ready", "draining",
                                                     "stopping"};

// Label values every reason-labelled counter exposes from the start, at 0, so that rate() and
// absent-series alerts work before the first event. Other values are accepted as they come (see
// Metrics::Rejected).
inline constexpr std::string_view kRejectReasons[] = {"queue_full", "invalid_argument", "draining",
                                                      "not_ready"};
inline constexpr std::string_view kFailReasons[] = {"worker_died", "collective_timeout",
                                                    "internal"};
inline constexpr std::string_view kCancelledBy[] = {"client", "deadline", "drain"};
inline constexpr std::string_view kFinishReasons[] = {"eos", "length", "stop"};

// A reason label value is 1 to 64 characters of [a-z0-9_]; anything else, and any new value once a
// family already holds this many values beyond its predefined ones, is counted as "other". This
// bounds the series count whatever the callers pass.
inline constexpr int kMaxExtraLabelValues = 16;

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Starts an HTTP /metrics endpoint on host:port (port 0 picks a free one); returns the bound
  // port. `address` must name a host ("127.0.0.1:9400", "[::1]:0", "0.0.0.0:9400"); a bare port is
  // refused so that nothing listens on every interface by accident. InvalidArgument for a malformed
  // address, Unavailable when it cannot be bound, FailedPrecondition when already serving. The
  // endpoint also carries prometheus-cpp's own `exposer_*` scrape families. It stops, and frees the
  // port, when the Metrics object is destroyed (within milliseconds). With a PEM certificate and
  // key it serves HTTPS (server/metrics_https.h).
  absl::StatusOr<int> Serve(const std::string& address, const std::string& tls_cert = "", const std::string& tls_key = "");

  std::string Render() const;  // the text exposition, for tests and `q38 health`

  // Request outcomes. RequestReceived counts q38_requests_received_total on arrival; each of the
  // four after it increments q38_requests_total{outcome} and its own family, and a request should
  // end in exactly one of them (received - sum of outcomes = requests in flight).
  void RequestReceived();
  void Rejected(std::string_view reason);  // e.g. queue_full, invalid_argument, draining, not_ready
  void Failed(std::string_view reason);    // e.g. worker_died, collective_timeout, internal
  void Cancelled(std::string_view by);     // client, deadline, drain
  void Finished(std::string_view finish_reason);  // eos, length, stop

  // Latencies in seconds. Negative and non-finite values are dropped (a monotonic clock cannot
  // produce them; counting them would corrupt _sum).
  void ObserveQueue(double s);       // arrival -> first scheduled (excludes prefill)
  void ObserveTtft(double s);        // arrival -> first output token
  void ObserveInterToken(double s);  // one per generated token after the first
  void ObservePrefill(double s);     // first scheduled -> first output token
  void ObserveDecode(double s);      // first output token -> last output token
  void ObserveE2e(double s);         // arrival -> final response
  void ObserveTpot(double s);        // per request: decode time / (output tokens - 1)

  // Token counters; n <= 0 is ignored.
  void AddPromptTokens(int64_t n);
  void AddGenerationTokens(int64_t n);

  void SetRunning(int n);
  void SetWaiting(int n);

  // One-hot gauges. A state outside kWorkerStates / kServerStates, or a negative rank, is ignored
  // and the previous state stays. A scrape never sees zero or two states hot.
  void SetWorkerState(int rank, std::string_view state);
  void SetServerState(std::string_view state);  // starts as "starting"
  void SetWorkerMemoryBytes(int rank, double bytes);

  // q38_contract_info{name, sha256} = 1 for the contract served or last benchmarked under; the
  // previous series goes.
  void SetContract(std::string_view name, std::string_view sha256);
  // The last benchmark: per-case gauges (the previous benchmark's cases go), whether it passed and
  // when it ended.
  void SetLastBenchmark(const std::vector<BenchmarkCaseGauges>& cases, bool passed, double ended_unix);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace q38
