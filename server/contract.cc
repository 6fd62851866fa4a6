#include "server/contract.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_fields.h"
#include "common/sha256.h"
#include "common/status.h"

namespace q38 {
namespace {

constexpr char kWhat[] = "contract";

template <typename T>
void Compare(std::vector<std::string>& out, const std::string& field, const T& want, const T& have, const std::string& who) {
  if (want != have) out.push_back(absl::StrCat(field, ": contract ", want, ", ", who, " has ", have));
}

std::string List(const std::vector<std::string>& v) { return absl::StrCat("[", absl::StrJoin(v, ", "), "]"); }

std::string Bool(bool b) { return b ? "true" : "false"; }

absl::Status ParseBenchmark(const Fields& f, ContractBenchmark& b) {
  RETURN_IF_ERROR(f.OnlyKeys({"prompt_lengths", "max_tokens", "repeats", "health_checks", "long_context"}));
  ASSIGN_OR_RETURN(b.prompt_lengths, f.IntList("prompt_lengths"));
  if (b.prompt_lengths.empty()) return f.Error("prompt_lengths", "must name at least one length");
  for (int64_t l : b.prompt_lengths) {
    if (l < 1) return f.Error("prompt_lengths", "lengths must be positive");
  }
  ASSIGN_OR_RETURN(int64_t max_tokens, f.PositiveInt("max_tokens"));
  if (max_tokens < 2) return f.Error("max_tokens", "must be at least 2 (decode needs two tokens)");
  b.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(int64_t repeats, f.PositiveInt("repeats"));
  if (repeats < 2) return f.Error("repeats", "must be at least 2");
  b.repeats = static_cast<int32_t>(repeats);
  ASSIGN_OR_RETURN(b.health_checks, f.StringList("health_checks"));
  for (const std::string& h : b.health_checks) {
    if (h != kHealthArithmetic && h != kHealthRecordCopy) return f.Error("health_checks", absl::StrCat("unknown check \"", h, "\""));
  }
  ASSIGN_OR_RETURN(b.long_context, f.Bool("long_context"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Contract> ParseContract(const std::string& text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(text, kWhat));
  Fields f(j, kWhat);
  RETURN_IF_ERROR(f.OnlyKeys({"name", "description", "model", "tp", "device", "dtypes", "graph_mode", "max_context",
                              "prefill_chunk", "max_num_seqs", "mtp", "prefix_cache", "approximate_routes", "routes",
                              "benchmark"}));
  Contract c;
  c.sha256 = Sha256Hex(text);
  ASSIGN_OR_RETURN(c.name, f.String("name"));
  if (f.Has("description")) RETURN_IF_ERROR(f.String("description").status());
  ASSIGN_OR_RETURN(Fields model, f.Object("model"));
  RETURN_IF_ERROR(model.OnlyKeys({"model_type", "experts", "synthetic"}));
  ASSIGN_OR_RETURN(c.model_type, model.String("model_type"));
  ASSIGN_OR_RETURN(c.experts, model.String("experts"));
  ASSIGN_OR_RETURN(c.synthetic, model.Bool("synthetic"));
  ASSIGN_OR_RETURN(int64_t tp, f.PositiveInt("tp"));
  c.tp = static_cast<int>(tp);
  ASSIGN_OR_RETURN(c.device, f.String("device"));
  ASSIGN_OR_RETURN(Fields dtypes, f.Object("dtypes"));
  RETURN_IF_ERROR(dtypes.OnlyKeys({"activation", "kv_cache", "gdn_state", "conv_state"}));
  ASSIGN_OR_RETURN(c.activation, dtypes.String("activation"));
  ASSIGN_OR_RETURN(c.kv_cache, dtypes.String("kv_cache"));
  ASSIGN_OR_RETURN(c.gdn_state, dtypes.String("gdn_state"));
  ASSIGN_OR_RETURN(c.conv_state, dtypes.String("conv_state"));
  ASSIGN_OR_RETURN(c.graph_mode, f.String("graph_mode"));
  ASSIGN_OR_RETURN(c.max_context, f.PositiveInt("max_context"));
  ASSIGN_OR_RETURN(c.prefill_chunk, f.PositiveInt("prefill_chunk"));
  ASSIGN_OR_RETURN(int64_t seqs, f.PositiveInt("max_num_seqs"));
  c.max_num_seqs = static_cast<int>(seqs);
  ASSIGN_OR_RETURN(c.mtp, f.Bool("mtp"));
  ASSIGN_OR_RETURN(c.prefix_cache, f.Bool("prefix_cache"));
  ASSIGN_OR_RETURN(c.approximate_routes, f.StringList("approximate_routes"));
  if (f.Has("routes")) {
    ASSIGN_OR_RETURN(c.routes, f.StringList("routes"));
  }
  ASSIGN_OR_RETURN(Fields bench, f.Object("benchmark"));
  RETURN_IF_ERROR(ParseBenchmark(bench, c.benchmark));
  const int64_t longest = *std::max_element(c.benchmark.prompt_lengths.begin(), c.benchmark.prompt_lengths.end());
  if (longest + c.benchmark.max_tokens > c.max_context) {
    return FieldError(kWhat, "benchmark.prompt_lengths", absl::StrCat(longest, " + ", c.benchmark.max_tokens, " tokens exceed max_context ", c.max_context));
  }
  return c;
}

std::vector<std::string> ContractDifferences(const Contract& c, const v1::Manifest& m) {
  std::vector<std::string> out;
  Compare(out, "tp", c.tp, m.tp(), "the server");
  std::vector<int> ranks;
  for (const v1::WorkerManifest& w : m.workers()) ranks.push_back(w.rank());
  std::sort(ranks.begin(), ranks.end());
  std::vector<int> want(c.tp);
  for (int r = 0; r < c.tp; ++r) want[r] = r;
  if (ranks != want) {
    out.push_back(absl::StrCat("workers: contract ranks 0..", c.tp - 1, ", manifest has ranks [", absl::StrJoin(ranks, ", "), "]"));
  }
  for (const v1::WorkerManifest& w : m.workers()) {
    const std::string at = absl::StrCat("workers[rank=", w.rank(), "].");
    const std::string who = absl::StrCat("rank ", w.rank());
    Compare(out, at + "model.model_type", c.model_type, w.model().model_type(), who);
    Compare(out, at + "model.experts", c.experts, w.model().experts(), who);
    Compare(out, at + "model.synthetic", Bool(c.synthetic), Bool(w.model().synthetic()), who);
    Compare(out, at + "device.kind", c.device, w.device().kind(), who);
    Compare(out, at + "dtypes.activation", c.activation, w.dtypes().activation(), who);
    Compare(out, at + "dtypes.kv_cache", c.kv_cache, w.dtypes().kv_cache(), who);
    Compare(out, at + "dtypes.gdn_state", c.gdn_state, w.dtypes().gdn_state(), who);
    Compare(out, at + "dtypes.conv_state", c.conv_state, w.dtypes().conv_state(), who);
    Compare(out, at + "graph_mode", c.graph_mode, w.graph_mode(), who);
    Compare(out, at + "max_context", c.max_context, w.max_context(), who);
    Compare(out, at + "prefill_chunk", c.prefill_chunk, w.prefill_chunk(), who);
    Compare(out, at + "max_num_seqs", c.max_num_seqs, w.max_num_seqs(), who);
    Compare(out, at + "mtp", Bool(c.mtp), Bool(w.mtp()), who);
    Compare(out, at + "prefix_cache", Bool(c.prefix_cache), Bool(w.prefix_cache()), who);
    Compare(out, at + "approximate_routes", List(c.approximate_routes),
            List({w.approximate_routes().begin(), w.approximate_routes().end()}), who);
    if (c.routes) Compare(out, at + "routes", List(*c.routes), List({w.routes().begin(), w.routes().end()}), who);
  }
  return out;
}

absl::Status CheckContract(const Contract& c, const v1::Manifest& m) {
  std::vector<std::string> diffs = ContractDifferences(c, m);
  if (diffs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the workers deviate from contract ", c.name, " in ", diffs.size(),
                                                    diffs.size() == 1 ? " field: " : " fields: ", absl::StrJoin(diffs, "; ")));
}

}  // namespace q38
