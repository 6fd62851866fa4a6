// The contract benchmark (docs/contract.md §5–6, docs/benchmark.md) as a protocol over a
// function that runs one request: health checks with the checkpoint's sampling and natural EOS,
// then per case the fixed prompt, one warmup and the timed repeats of greedy tokens with EOS
// ignored, each token-identical to the warmup and to a reference report when given; with
// long_context the middle-record check and the context boundary. The report is handed out after
// every step, so a caller can save it atomically each time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "nlohmann/json.hpp"
#include "q38/v1/q38.pb.h"
#include "server/contract.h"
#include "tokenizer/tokenizer.h"

namespace q38 {

inline constexpr char kBenchmarkReportSchema[] = "q38.benchmark_report/1";

struct BenchRequest {
  std::string name;  // for errors: "fixed_64 run 2"
  std::vector<int32_t> prompt;
  float temperature = 0;  // 0: greedy
  float top_p = 1;
  int32_t top_k = 0;
  uint64_t seed = 0;
  int32_t max_tokens = 1;
  bool ignore_eos = true;
};

// One request as the scheduler saw it. Seconds between its timestamps: received, scheduled (sent
// to the ranks), first and last token.
struct BenchResult {
  std::vector<int32_t> tokens;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;  // EOS, STOP or LENGTH
  double queued_s = 0;        // received -> scheduled
  double prefill_s = 0;       // scheduled -> first token
  double decode_s = 0;        // first token -> last token
  double e2e_s = 0;           // received -> last token
};

using RunRequestFn = std::function<absl::StatusOr<BenchResult>(const BenchRequest&)>;
// Gathers the worker manifests again (after the first warmup) and checks them; the served manifest.
using ManifestFn = std::function<absl::StatusOr<nlohmann::json>()>;
using StepFn = std::function<void(const std::string& step, const nlohmann::json& report)>;

struct BenchmarkPlan {
  Contract contract;
  nlohmann::json contract_json;  // the file as given, for the report
  int repeats = 0;               // at least 2
  std::optional<nlohmann::json> reference;  // an earlier report
  const Tokenizer* tokenizer = nullptr;     // the checkpoint's; the fixed prompt needs it
  GenerationConfig generation;              // the health checks' sampling
  nlohmann::json build;                     // the bundle's build manifest, or null
  nlohmann::json manifest;                  // the served manifest at the start
};

class Benchmark {
 public:
  Benchmark(BenchmarkPlan plan, RunRequestFn run, ManifestFn manifests, StepFn on_step);

  // InvalidArgument or FailedPrecondition before anything runs when the plan cannot be run (too
  // few repeats, a reference missing a case, no tokenizer, health checks without a chat template).
  absl::Status Validate() const;
  // Runs every step. The first failure ends the run: its message is the report's "error".
  absl::Status Run();
  const nlohmann::json& report() const { return report_; }

 private:
  absl::Status RunHealth(const std::string& name, const std::vector<int32_t>& ids, const std::string& pattern);
  absl::Status RunCase(int64_t length);
  absl::Status RunBoundary();
  absl::StatusOr<std::vector<int32_t>> ChatPrompt(const std::string& user) const;
  absl::StatusOr<BenchResult> Request(BenchRequest r);
  nlohmann::json RunJson(const BenchResult& r, int64_t input_tokens) const;
  void Step(const std::string& step);
  std::vector<int64_t> Lengths() const;

  BenchmarkPlan plan_;
  RunRequestFn run_;
  ManifestFn manifests_;
  StepFn on_step_;
  nlohmann::json report_;
  bool manifests_refreshed_ = false;
};

// The ids of case `name`'s first run (runs[0].token_ids) in a reference report, an earlier report
// sent by a client. InvalidArgument naming what is wrong when the case is missing or an id is not
// an integer in [0, 2^31); never throws.
absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const nlohmann::json& report, const std::string& name);

// Where two token sequences first differ (the shorter length when one is a prefix of the other);
// nullopt when equal.
std::optional<size_t> FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace q38
