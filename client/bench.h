// `q38 bench`: latency and throughput of Generate measured from the client side. Every request is
// greedy with EOS ignored, so each produces exactly max_tokens tokens.
//
// Per request: TTFT is the call's start to the first message carrying tokens; a message carrying
// k tokens that arrives g after the previous token-carrying message contributes k inter-token
// latencies of g/k (the extra tokens of the first message arrive with the first token and
// contribute none); TPOT is (last token − first token) / (tokens − 1); e2e is the call's start
// to the stream's close; tok/s is tokens / e2e.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/stats.h"
#include "nlohmann/json.hpp"

namespace q38::client {

struct RequestMetrics {
  int completion_tokens = 0;
  int messages = 0;  // token-carrying messages
  double ttft_s = 0;
  std::optional<double> tpot_s;  // absent with fewer than two tokens
  double e2e_s = 0;
  double tok_s = 0;
  std::vector<double> itl_s;  // one per token after the first message
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Timings server_timings;  // what the server reported on the last message
};

// Fails when the stream carried no tokens.
absl::StatusOr<RequestMetrics> MeasureRequest(const GenerateResult& result);

struct BenchOptions {
  std::string server;
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  int requests = 1;
  int warmup = 1;
  std::optional<std::chrono::duration<double>> timeout;  // per request
  std::optional<int> logprobs;  // asked of every request (the HTTP front end's work, compared like for like)
};

struct BenchSummary {
  Summary ttft_s, tpot_s, itl_s, e2e_s, tok_s;   // ITL over tokens, the rest over requests
  Summary server_ttft_s, server_tpot_s;          // as reported by the server
  double aggregate_tok_s = 0;  // all tokens / the sum of e2e
};

BenchSummary SummarizeRequests(const std::vector<RequestMetrics>& requests);

struct BenchReport {
  BenchOptions options;
  std::vector<RequestMetrics> requests;  // timed ones only
  BenchSummary summary;
  bool tokens_identical = true;  // every request (warmups included) produced the same tokens
  double wall_s = 0;             // the timed requests, start to end
  std::optional<v1::Info> info;
  std::optional<v1::Manifest> manifest;
};

// Runs `warmup` then `requests` requests one after another. Fails on the first failed request, or
// when one produced other than max_tokens tokens. `progress` (optional) is told after each.
absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options,
                                     const std::function<void(const std::string&)>& progress = {});

// `len` ids drawn deterministically from [0, vocab) by `seed`, skipping `exclude` (EOS ids).
std::vector<int32_t> SyntheticPrompt(int len, int vocab, const std::vector<int32_t>& exclude,
                                     uint64_t seed);

std::string FormatBenchTable(const BenchReport& report);
nlohmann::json BenchReportJson(const BenchReport& report);

}  // namespace q38::client
