#include "client/bench.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format.h"
#include "proto/enum_names.h"
#include "tokenizer/fixed_prompt.h"

namespace q38::client {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

nlohmann::json SummaryJson(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90},
          {"p99", s.p99},     {"min", s.min},   {"max", s.max}};
}

nlohmann::json TimingsJson(const v1::Timings& t) {
  return {{"queue", t.queue()},   {"prefill", t.prefill()}, {"ttft", t.ttft()},
          {"decode", t.decode()}, {"tpot", t.tpot()},       {"e2e", t.e2e()}};
}

}  // namespace

absl::StatusOr<RequestMetrics> MeasureRequest(const GenerateResult& result) {
  if (result.arrivals.empty()) return absl::FailedPreconditionError("the stream carried no tokens");
  RequestMetrics m;
  m.completion_tokens = static_cast<int>(result.token_ids.size());
  m.messages = static_cast<int>(result.arrivals.size());
  m.finish_reason = result.finish_reason;
  m.server_timings = result.timings;
  const Clock::time_point first = result.arrivals.front().at;
  const Clock::time_point last = result.arrivals.back().at;
  m.ttft_s = Seconds(first - result.start);
  m.e2e_s = Seconds(result.end - result.start);
  if (m.completion_tokens >= 2) m.tpot_s = Seconds(last - first) / (m.completion_tokens - 1);
  m.tok_s = m.e2e_s > 0 ? m.completion_tokens / m.e2e_s : 0;
  for (size_t i = 1; i < result.arrivals.size(); ++i) {
    const Arrival& a = result.arrivals[i];
    const double share = Seconds(a.at - result.arrivals[i - 1].at) / a.tokens;
    m.itl_s.insert(m.itl_s.end(), a.tokens, share);
  }
  return m;
}

BenchSummary SummarizeRequests(const std::vector<RequestMetrics>& requests) {
  std::vector<double> ttft, tpot, itl, e2e, tok_s, server_ttft, server_tpot;
  double tokens = 0, e2e_sum = 0;
  for (const RequestMetrics& r : requests) {
    ttft.push_back(r.ttft_s);
    if (r.tpot_s) tpot.push_back(*r.tpot_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    tok_s.push_back(r.tok_s);
    server_ttft.push_back(r.server_timings.ttft());
    if (r.completion_tokens >= 2) server_tpot.push_back(r.server_timings.tpot());
    tokens += r.completion_tokens;
    e2e_sum += r.e2e_s;
  }
  BenchSummary s;
  s.ttft_s = Summarize(ttft);
  s.tpot_s = Summarize(tpot);
  s.itl_s = Summarize(itl);
  s.e2e_s = Summarize(e2e);
  s.tok_s = Summarize(tok_s);
  s.server_ttft_s = Summarize(server_ttft);
  s.server_tpot_s = Summarize(server_tpot);
  s.aggregate_tok_s = e2e_sum > 0 ? tokens / e2e_sum : 0;
  return s;
}

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options,
                                     const std::function<void(const std::string&)>& progress) {
  if (options.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (options.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be at least 1");
  if (options.requests < 1) return absl::InvalidArgumentError("requests must be at least 1");
  if (options.warmup < 0) return absl::InvalidArgumentError("warmup must not be negative");

  v1::GenerateRequest request;
  request.mutable_tokens()->mutable_ids()->Add(options.prompt.begin(), options.prompt.end());
  request.set_max_tokens(options.max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);  // greedy
  if (options.logprobs) request.set_logprobs(*options.logprobs);

  BenchReport report;
  report.options = options;
  std::optional<std::vector<int32_t>> reference;
  Clock::time_point timed_start;
  const int total = options.warmup + options.requests;
  for (int i = 0; i < total; ++i) {
    const bool warmup = i < options.warmup;
    if (i == options.warmup) timed_start = Clock::now();
    const std::string name = warmup ? absl::StrCat("warmup ", i + 1)
                                    : absl::StrCat("request ", i - options.warmup + 1);
    request.set_request_id(absl::StrCat("q38-bench-", warmup ? "warmup-" : "", i + 1));
    absl::StatusOr<GenerateResult> result = client.Generate(request, options.timeout);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat(name, ": ", result.status().message()));
    }
    if (static_cast<int>(result->token_ids.size()) != options.max_tokens) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s generated %d tokens (finish reason %s), expected %d with EOS ignored", name,
          result->token_ids.size(), FinishReasonName(result->finish_reason), options.max_tokens));
    }
    if (!reference) reference = result->token_ids;
    if (*reference != result->token_ids) report.tokens_identical = false;
    absl::StatusOr<RequestMetrics> m = MeasureRequest(*result);
    if (!m.ok()) return absl::Status(m.status().code(), absl::StrCat(name, ": ", m.status().message()));
    if (progress) {
      progress(absl::StrFormat("%s: ttft %.2f ms, e2e %.2f ms, %.1f tok/s", name,
                               m->ttft_s * 1e3, m->e2e_s * 1e3, m->tok_s));
    }
    if (!warmup) report.requests.push_back(*std::move(m));
  }
  report.wall_s = Seconds(Clock::now() - timed_start);
  report.summary = SummarizeRequests(report.requests);
  return report;
}

std::vector<int32_t> SyntheticPrompt(int len, int vocab, const std::vector<int32_t>& exclude,
                                     uint64_t seed) {
  std::vector<int32_t> ids;
  if (len <= 0 || vocab <= 0) return ids;
  std::mt19937_64 rng(seed);
  ids.reserve(len);
  // mt19937_64's output is fixed by the standard (uniform_int_distribution's is not); the modulo
  // bias is negligible for vocabularies far below 2^64.
  for (int64_t guard = 0; static_cast<int>(ids.size()) < len && guard < int64_t{len} * 64; ++guard) {
    const auto id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (std::find(exclude.begin(), exclude.end(), id) == exclude.end()) ids.push_back(id);
  }
  return ids;
}

std::string FormatBenchTable(const BenchReport& report) {
  const BenchOptions& o = report.options;
  const BenchSummary& s = report.summary;
  std::string out = absl::StrFormat(
      "q38 bench %s: %d requests (+%d warmup), prompt %d tokens, %d generated each, %.3f s\n",
      o.server, o.requests, o.warmup, o.prompt.size(), o.max_tokens, report.wall_s);
  Table table({"metric", "over", "n", "mean", "p50", "p90", "p99", "unit"});
  auto row = [&](const std::string& name, const char* over, const Summary& v, double scale,
                 const char* unit) {
    table.AddRow({name, over, absl::StrCat(v.count), absl::StrFormat("%.3f", v.mean * scale),
                  absl::StrFormat("%.3f", v.p50 * scale), absl::StrFormat("%.3f", v.p90 * scale),
                  absl::StrFormat("%.3f", v.p99 * scale), unit});
  };
  row("ttft", "requests", s.ttft_s, 1e3, "ms");
  row("tpot", "requests", s.tpot_s, 1e3, "ms");
  row("itl", "tokens", s.itl_s, 1e3, "ms");
  row("e2e", "requests", s.e2e_s, 1e3, "ms");
  row("tok/s", "requests", s.tok_s, 1, "tok/s");
  row("server ttft", "requests", s.server_ttft_s, 1e3, "ms");
  row("server tpot", "requests", s.server_tpot_s, 1e3, "ms");
  out += table.Render();
  out += absl::StrFormat("aggregate %.1f tok/s (all tokens / sum of e2e)\n", s.aggregate_tok_s);
  if (!report.tokens_identical) {
    out += "warning: greedy requests produced different tokens\n";
  }
  return out;
}

nlohmann::json BenchReportJson(const BenchReport& report) {
  const BenchOptions& o = report.options;
  const BenchSummary& s = report.summary;
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestMetrics& r : report.requests) {
    requests.push_back({{"completion_tokens", r.completion_tokens},
                        {"messages", r.messages},
                        {"finish_reason", FinishReasonName(r.finish_reason)},
                        {"ttft_s", r.ttft_s},
                        {"tpot_s", r.tpot_s ? nlohmann::json(*r.tpot_s) : nlohmann::json()},
                        {"e2e_s", r.e2e_s},
                        {"tok_s", r.tok_s},
                        {"itl_s", r.itl_s},
                        {"server_timings_s", TimingsJson(r.server_timings)}});
  }
  nlohmann::json j = {
      {"server", o.server},
      {"config",
       {{"prompt_tokens", o.prompt.size()},
        {"max_tokens", o.max_tokens},
        {"requests", o.requests},
        {"warmup", o.warmup},
        {"sampling", "greedy"},
        {"ignore_eos", true}}},
      {"prompt_token_ids", o.prompt},
      {"prompt_sha256", HashIds(o.prompt)},
      {"wall_s", report.wall_s},
      {"tokens_identical", report.tokens_identical},
      {"summary",
       {{"ttft_s", SummaryJson(s.ttft_s)},
        {"tpot_s", SummaryJson(s.tpot_s)},
        {"itl_s", SummaryJson(s.itl_s)},
        {"e2e_s", SummaryJson(s.e2e_s)},
        {"tok_s", SummaryJson(s.tok_s)},
        {"server_ttft_s", SummaryJson(s.server_ttft_s)},
        {"server_tpot_s", SummaryJson(s.server_tpot_s)},
        {"aggregate_tok_s", s.aggregate_tok_s}}},
      {"requests", requests},
  };
  if (report.info) j["info"] = ProtoJson(*report.info);
  if (report.manifest) j["manifest"] = ProtoJson(*report.manifest);
  return j;
}

}  // namespace q38::client
