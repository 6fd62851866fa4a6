#include "client/contract_bench.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format.h"
#include "common/atomic_file.h"

namespace q38::client {
namespace {

using nlohmann::json;

// "mean (min-max)" of one summary metric, scaled.
std::string Spread(const json& summary, const char* metric, double scale, const char* format) {
  const json& m = summary[metric];
  return absl::StrCat(absl::StrFormat(format, m["mean"].get<double>() * scale), " (",
                      absl::StrFormat(format, m["min"].get<double>() * scale), "-",
                      absl::StrFormat(format, m["max"].get<double>() * scale), ")");
}

}  // namespace

ContractBenchResult RunContractBench(Client& client, const ContractBenchOptions& o,
                                     const std::function<void(const std::string&)>& progress) {
  v1::BenchmarkRequest request;
  request.set_contract_json(o.contract_json);
  request.set_repeats(o.repeats);
  request.set_reference_json(o.reference_json);
  ContractBenchResult result;
  absl::Status save_error;
  result.status = client.Benchmark(request, o.timeout, [&](const v1::BenchmarkProgress& p) {
    json report = json::parse(p.report_json(), nullptr, /*allow_exceptions=*/false);
    if (report.is_discarded()) {
      save_error = absl::DataLossError(absl::StrCat("the server sent a report that is not JSON at step ", p.step()));
      return;
    }
    result.report = std::move(report);
    if (!o.report_path.empty() && save_error.ok()) save_error = WriteFileAtomically(o.report_path, DumpJson(result.report) + "\n");
    if (progress) progress(p.step());
  });
  if (!save_error.ok() && result.status.ok()) result.status = save_error;
  return result;
}

std::string FormatContractReport(const json& report) {
  std::string out = absl::StrCat("contract ", report["contract"].value("name", "?"), ", ", report["repeats"].get<int>(),
                                 " timed repeats; ", report["complete"].get<bool>() ? "complete" : "INCOMPLETE", "\n");
  if (!report["health"].empty()) {
    Table health({"health check", "input tokens", "finish", "verdict"});
    for (const json& h : report["health"]) {
      health.AddRow({h["name"], absl::StrCat(h["input_tokens"].get<int64_t>()), h["result"]["finish_reason"],
                     h["passed"].get<bool>() ? "pass" : "FAIL"});
    }
    out += health.Render();
  }
  Table cases({"case", "input", "prompt sha256", "decode tok/s", "prefill tok/s", "tpot ms", "ttft ms", "repeats", "reference"});
  for (const json& c : report["cases"]) {
    if (!c.contains("summary")) {
      cases.AddRow({c["name"], absl::StrCat(c["input_tokens"].get<int64_t>()), c["prompt_sha256"].get<std::string>().substr(0, 12),
                    "-", "-", "-", "-", "unfinished", "-"});
      continue;
    }
    const json& s = c["summary"];
    cases.AddRow({c["name"], absl::StrCat(c["input_tokens"].get<int64_t>()), c["prompt_sha256"].get<std::string>().substr(0, 12),
                  Spread(s, "decode_tps", 1, "%.2f"), Spread(s, "prefill_tps", 1, "%.1f"), Spread(s, "tpot_ms", 1, "%.3f"),
                  Spread(s, "ttft_s", 1e3, "%.1f"), absl::StrCat(c["runs"].size(), " identical"),
                  c["matches_reference"].is_null() ? "-" : "match"});
  }
  out += cases.Render();
  if (report["error"].is_string()) out += absl::StrCat("error: ", report["error"].get<std::string>(), "\n");
  return out;
}

}  // namespace q38::client
