#include "server/benchmark.h"

#include <algorithm>
#include <chrono>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "proto/enum_names.h"
#include "tokenizer/fixed_prompt.h"

namespace q38 {
namespace {

using nlohmann::json;

// The health prompts and patterns of the seed's driver (docs/contract.md §6), byte for byte:
// their bytes decide the prompt ids.
struct HealthCheck {
  const char* name;
  const char* prompt;
  const char* pattern;
};
constexpr HealthCheck kHealthChecks[] = {
    {kHealthArithmetic, "请计算 19 × 23。请在最后一行写 RESULT=计算结果。", R"(RESULT\s*=\s*437\b)"},
    {kHealthRecordCopy, "项目代号 CEDAR-47，编号 8261。最后一行准确输出 CEDAR-47|8261。", R"(CEDAR-47\s*\|\s*8261)"},
};
constexpr char kLongMarker[] = "ONECAT_LONG_ARCHIVE_MARKER";
constexpr char kLongInstruction[] = "\nFind the archive code and finish with RESULT=<code>.";
constexpr char kLongFiller[] = "A routine archive entry, without task instructions.\n";
constexpr char kLongRecord[] = "\nArchive code: MAPLE-8261.\n";
constexpr char kLongPattern[] = R"(RESULT\s*=\s*MAPLE-8261)";
constexpr char kScope[] =
    "Warm single-request fixed-prompt benchmark; forced post-EOS timing is not quality evidence. "
    "Natural health and boundary checks are separate requests with separate verdicts.";

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// min / max / mean of one metric over the timed runs.
json Summary(const json& runs, const char* metric) {
  double lo = 0, hi = 0, sum = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const double v = runs[i]["metrics"][metric].get<double>();
    lo = i == 0 ? v : std::min(lo, v);
    hi = i == 0 ? v : std::max(hi, v);
    sum += v;
  }
  return {{"min", lo}, {"max", hi}, {"mean", runs.empty() ? 0 : sum / runs.size()}};
}

std::vector<int32_t> Repeat(const std::vector<int32_t>& piece, int64_t length) {
  std::vector<int32_t> out;
  out.reserve(length);
  for (int64_t i = 0; i < length && !piece.empty(); ++i) out.push_back(piece[i % piece.size()]);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const json& report, const std::string& name) {
  // The report comes from a client: every access checks the type first, since nlohmann's getters
  // throw on a mismatch and an exception here would end the server.
  if (!report.is_object() || !report.contains("cases") || !report["cases"].is_array()) {
    return absl::InvalidArgumentError("reference: not a benchmark report (no cases list)");
  }
  for (const json& c : report["cases"]) {
    if (!c.is_object() || !c.contains("name") || c["name"] != name) continue;
    if (!c.contains("runs") || !c["runs"].is_array() || c["runs"].empty() || !c["runs"][0].is_object() ||
        !c["runs"][0].contains("token_ids") || !c["runs"][0]["token_ids"].is_array()) {
      break;
    }
    const json& ids = c["runs"][0]["token_ids"];
    std::vector<int32_t> out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const json& id = ids[i];
      const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() <= INT32_MAX
                                                    : id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX;
      if (!in_range) {
        return absl::InvalidArgumentError(absl::StrCat("reference: case ", name, " runs[0].token_ids[", i,
                                                       "]: not a token id (an integer in [0, 2^31)), got ",
                                                       id.is_number() ? id.dump() : id.type_name()));
      }
      out.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("reference: no case ", name, " with runs[0].token_ids"));
}

std::optional<size_t> FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia == a.end() && ib == b.end()) return std::nullopt;
  return static_cast<size_t>(ia - a.begin());
}

Benchmark::Benchmark(BenchmarkPlan plan, RunRequestFn run, ManifestFn manifests, StepFn on_step)
    : plan_(std::move(plan)), run_(std::move(run)), manifests_(std::move(manifests)), on_step_(std::move(on_step)) {
  report_ = {{"schema", kBenchmarkReportSchema},
             {"contract", plan_.contract_json},
             {"contract_sha256", plan_.contract.sha256},
             {"repeats", plan_.repeats},
             {"build", plan_.build},
             {"manifest", plan_.manifest},
             {"started_unix", NowUnix()},
             {"ended_unix", nullptr},
             {"health", json::array()},
             {"cases", json::array()},
             {"exact_context_boundary", nullptr},
             {"scope", kScope},
             {"complete", false},
             {"error", nullptr}};
}

std::vector<int64_t> Benchmark::Lengths() const {
  std::vector<int64_t> lengths = plan_.contract.benchmark.prompt_lengths;
  if (plan_.contract.benchmark.long_context) lengths.push_back(plan_.contract.max_context - plan_.contract.benchmark.max_tokens);
  return lengths;
}

absl::Status Benchmark::Validate() const {
  if (plan_.repeats < 2) return absl::InvalidArgumentError(absl::StrCat("repeats: at least 2 timed repeats, got ", plan_.repeats));
  if (plan_.tokenizer == nullptr) return absl::FailedPreconditionError("the checkpoint ships no tokenizer; the fixed prompt needs one");
  const bool chat = !plan_.contract.benchmark.health_checks.empty() || plan_.contract.benchmark.long_context;
  if (chat && plan_.tokenizer->chat_template_kind() == ChatTemplateKind::kUnknown) {
    return absl::FailedPreconditionError("the contract's health checks need the checkpoint's chat template, which this build cannot render");
  }
  if (plan_.reference) {
    for (int64_t length : Lengths()) RETURN_IF_ERROR(ReferenceTokens(*plan_.reference, absl::StrCat("fixed_", length)).status());
  }
  return absl::OkStatus();
}

void Benchmark::Step(const std::string& step) {
  if (on_step_) on_step_(step, report_);
}

absl::StatusOr<BenchResult> Benchmark::Request(BenchRequest r) {
  absl::StatusOr<BenchResult> out = run_(r);
  if (!out.ok()) return absl::Status(out.status().code(), absl::StrCat(r.name, ": ", out.status().message()));
  return out;
}

json Benchmark::RunJson(const BenchResult& r, int64_t input_tokens) const {
  const size_t n = r.tokens.size();
  const double intervals = n > 1 ? static_cast<double>(n - 1) : 0;
  json metrics = {{"queued_s", r.queued_s},
                  {"prefill_s", r.prefill_s},
                  {"decode_s", r.decode_s},
                  {"ttft_s", r.queued_s + r.prefill_s},
                  {"inference_s", r.prefill_s + r.decode_s},
                  {"e2e_s", r.e2e_s},
                  {"prefill_tps", Ratio(static_cast<double>(input_tokens), r.prefill_s)},
                  {"decode_tps", Ratio(intervals, r.decode_s)},
                  {"tpot_ms", Ratio(r.decode_s * 1e3, intervals)},
                  {"output_tps", Ratio(static_cast<double>(n), r.e2e_s)}};
  return {{"token_ids", r.tokens},
          {"output_sha256", HashIds(r.tokens)},
          {"output_tokens", n},
          {"text", plan_.tokenizer->Decode(r.tokens)},
          {"finish_reason", FinishReasonName(r.finish_reason)},
          {"metrics", metrics}};
}

absl::StatusOr<std::vector<int32_t>> Benchmark::ChatPrompt(const std::string& user) const {
  ChatOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = true;
  ASSIGN_OR_RETURN(std::string text, plan_.tokenizer->ApplyChatTemplate({{"user", user, std::nullopt, false}}, options));
  return plan_.tokenizer->Encode(text);
}

absl::Status Benchmark::RunHealth(const std::string& name, const std::vector<int32_t>& ids, const std::string& pattern) {
  const GenerationConfig& g = plan_.generation;
  // As in transformers: without do_sample the checkpoint asks for greedy decoding, whatever its temperature.
  const float temperature = g.do_sample ? static_cast<float>(g.temperature) : 0.0f;
  ASSIGN_OR_RETURN(BenchResult r, Request({.name = "health " + name, .prompt = ids, .temperature = temperature,
                                           .top_p = static_cast<float>(g.top_p), .top_k = g.top_k, .seed = 0,
                                           .max_tokens = plan_.contract.benchmark.max_tokens, .ignore_eos = false}));
  json result = RunJson(r, static_cast<int64_t>(ids.size()));
  std::string answer = result["text"].get<std::string>();
  if (const size_t think = answer.rfind("</think>"); think != std::string::npos) answer = answer.substr(think + 8);
  const bool natural = r.finish_reason == v1::FINISH_REASON_EOS;
  const bool matched = std::regex_search(answer, std::regex(pattern));
  report_["health"].push_back({{"name", name}, {"input_tokens", ids.size()}, {"pattern", pattern},
                               {"passed", natural && matched}, {"result", result}});
  Step("health " + name);
  if (!natural) return absl::FailedPreconditionError(absl::StrCat("health check ", name, " failed: finish reason ", FinishReasonName(r.finish_reason), ", not a natural EOS"));
  if (!matched) return absl::FailedPreconditionError(absl::StrCat("health check ", name, " failed: the answer does not match ", pattern));
  return absl::OkStatus();
}

absl::Status Benchmark::RunCase(int64_t length) {
  const int32_t max_tokens = plan_.contract.benchmark.max_tokens;
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, FixedPrompt(*plan_.tokenizer, kFixedPromptSentence, length));
  const std::string name = absl::StrCat("fixed_", length);
  std::optional<std::vector<int32_t>> reference;
  if (plan_.reference) {
    ASSIGN_OR_RETURN(reference, ReferenceTokens(*plan_.reference, name));
  }
  report_["cases"].push_back({{"name", name}, {"input_tokens", length}, {"prompt_sha256", HashIds(prompt)},
                              {"max_tokens", max_tokens}, {"warmup", nullptr}, {"runs", json::array()}});
  json& c = report_["cases"].back();
  BenchRequest request{.name = name + " warmup", .prompt = prompt, .max_tokens = max_tokens, .ignore_eos = true};
  ASSIGN_OR_RETURN(BenchResult warmup, Request(request));
  c["warmup"] = RunJson(warmup, length);
  Step(request.name);
  if (!manifests_refreshed_) {
    // Libraries a backend loads on first use are mapped by now: gather and check again.
    ASSIGN_OR_RETURN(report_["manifest"], manifests_());
    manifests_refreshed_ = true;
    Step("manifests");
  }
  for (int i = 1; i <= plan_.repeats; ++i) {
    request.name = absl::StrCat(name, " run ", i);
    ASSIGN_OR_RETURN(BenchResult r, Request(request));
    report_["cases"].back()["runs"].push_back(RunJson(r, length));
    Step(request.name);
    if (static_cast<int32_t>(r.tokens.size()) != max_tokens) {
      return absl::FailedPreconditionError(absl::StrCat(request.name, ": generated ", r.tokens.size(), " tokens (finish reason ",
                                                        FinishReasonName(r.finish_reason), "), expected ", max_tokens, " with EOS ignored"));
    }
    if (std::optional<size_t> at = FirstDifference(warmup.tokens, r.tokens)) {
      return absl::FailedPreconditionError(absl::StrCat("token repeatability failed: ", request.name, ": token ", *at,
                                                        " differs from the warmup"));
    }
    if (reference) {
      if (std::optional<size_t> at = FirstDifference(*reference, r.tokens)) {
        return absl::FailedPreconditionError(absl::StrCat(request.name, ": token ", *at, " differs from the reference (reference ",
                                                          *at < reference->size() ? absl::StrCat((*reference)[*at]) : "ended",
                                                          ", this run ", *at < r.tokens.size() ? absl::StrCat(r.tokens[*at]) : "ended", ")"));
      }
    }
  }
  json& done = report_["cases"].back();
  json summary;
  for (const char* metric : {"prefill_tps", "decode_tps", "tpot_ms", "ttft_s", "queued_s", "inference_s", "output_tps"}) {
    summary[metric] = Summary(done["runs"], metric);
  }
  done["summary"] = summary;
  done["prefill_tps_mean"] = summary["prefill_tps"]["mean"];
  done["decode_tps_mean"] = summary["decode_tps"]["mean"];
  done["tpot_ms_mean"] = summary["tpot_ms"]["mean"];
  done["same_token_hash"] = true;
  done["matches_reference"] = reference ? json(true) : json(nullptr);
  Step(name);
  return absl::OkStatus();
}

absl::Status Benchmark::RunBoundary() {
  const int64_t context = plan_.contract.max_context;
  // The middle-record retrieval: filler around one record line, the whole prompt max_context - max_tokens long.
  ASSIGN_OR_RETURN(std::string rendered,
                   plan_.tokenizer->ApplyChatTemplate({{"user", absl::StrCat(kLongMarker, kLongInstruction), std::nullopt, false}},
                                                      {.add_generation_prompt = true, .enable_thinking = true}));
  const size_t at = rendered.find(kLongMarker);
  ASSIGN_OR_RETURN(std::vector<int32_t> lead, plan_.tokenizer->Encode(rendered.substr(0, at)));
  ASSIGN_OR_RETURN(std::vector<int32_t> tail, plan_.tokenizer->Encode(rendered.substr(at + sizeof(kLongMarker) - 1)));
  ASSIGN_OR_RETURN(std::vector<int32_t> filler, plan_.tokenizer->Encode(kLongFiller, {.match_special_tokens = false}));
  ASSIGN_OR_RETURN(std::vector<int32_t> record, plan_.tokenizer->Encode(kLongRecord, {.match_special_tokens = false}));
  const int64_t count = context - plan_.contract.benchmark.max_tokens - static_cast<int64_t>(lead.size() + tail.size() + record.size());
  if (count < 0) return absl::FailedPreconditionError("max_context is too small for the middle-record check");
  const std::vector<int32_t> padding = Repeat(filler, count);
  std::vector<int32_t> ids = lead;
  ids.insert(ids.end(), padding.begin(), padding.begin() + count / 2);
  ids.insert(ids.end(), record.begin(), record.end());
  ids.insert(ids.end(), padding.begin() + count / 2, padding.end());
  ids.insert(ids.end(), tail.begin(), tail.end());
  RETURN_IF_ERROR(RunHealth("long_middle_record", ids, kLongPattern));

  // The exact boundary: max_context - 1 prompt tokens and one greedy token fill the context.
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, FixedPrompt(*plan_.tokenizer, kFixedPromptSentence, context - 1));
  ASSIGN_OR_RETURN(BenchResult r, Request({.name = "exact_context_boundary", .prompt = prompt, .max_tokens = 1, .ignore_eos = true}));
  report_["exact_context_boundary"] = RunJson(r, context - 1);
  Step("exact_context_boundary");
  if (r.tokens.size() != 1) return absl::FailedPreconditionError(absl::StrCat("the context boundary produced ", r.tokens.size(), " tokens, not 1"));
  return absl::OkStatus();
}

absl::Status Benchmark::Run() {
  absl::Status status = Validate();
  if (status.ok()) {
    Step("start");
    for (const HealthCheck& h : kHealthChecks) {
      const auto& wanted = plan_.contract.benchmark.health_checks;
      if (!status.ok() || std::find(wanted.begin(), wanted.end(), h.name) == wanted.end()) continue;
      absl::StatusOr<std::vector<int32_t>> ids = ChatPrompt(h.prompt);
      status = ids.ok() ? RunHealth(h.name, *ids, h.pattern) : ids.status();
    }
    for (int64_t length : Lengths()) {
      if (status.ok()) status = RunCase(length);
    }
    if (status.ok() && plan_.contract.benchmark.long_context) status = RunBoundary();
  }
  report_["complete"] = status.ok();
  if (!status.ok()) report_["error"] = std::string(status.message());
  report_["ended_unix"] = NowUnix();
  Step("done");
  return status;
}

}  // namespace q38
