#include "client/cli.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/bench.h"
#include "client/client.h"
#include "client/format.h"
#include "client/contract_bench.h"
#include "client/manifest.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "google/protobuf/text_format.h"
#include "proto/enum_names.h"
#include "provenance/bundle.h"
#include "tokenizer/fixed_prompt.h"

namespace q38::client {
namespace {

using HealthStatus = ::grpc::health::v1::HealthCheckResponse;
using Seconds = std::chrono::duration<double>;

constexpr double kDefaultUnaryTimeoutS = 10;
constexpr char kReadinessService[] = "q38.v1.Q38";

int Usage(std::ostream& err, const std::string& cmd, const std::string& message) {
  err << "q38" << (cmd.empty() ? "" : " ") << cmd << ": " << message
      << "\nrun `q38 --help` for usage\n";
  return kExitUsage;
}

int Fail(std::ostream& err, const std::string& cmd, const absl::Status& status) {
  err << "q38 " << cmd << ": " << absl::StatusCodeToString(status.code()) << " ("
      << static_cast<int>(status.code()) << "): " << status.message() << "\n";
  const int code = static_cast<int>(status.code());
  return code > 0 && code < kExitUsage ? code : kExitFailed;
}

// The names of the flags given, in declaration order.
std::vector<std::string> GivenFlags(const CliArgs& a) {
  std::vector<std::string> given;
  auto add = [&](const char* name, bool is_given) {
    if (is_given) given.push_back(name);
  };
  add("server", a.server.has_value());
  add("tokens", a.tokens.has_value());
  add("text", a.text.has_value());
  add("max_tokens", a.max_tokens.has_value());
  add("temperature", a.temperature.has_value());
  add("top_k", a.top_k.has_value());
  add("top_p", a.top_p.has_value());
  add("seed", a.seed.has_value());
  add("ignore_eos", a.ignore_eos);
  add("stop_token_ids", a.stop_token_ids.has_value());
  add("logprobs", a.logprobs.has_value());
  add("json", a.json);
  add("timeout_s", a.timeout_s.has_value());
  add("diff", a.diff);
  add("ignore_fields", a.ignore_fields.has_value());
  add("prompt_len", a.prompt_len.has_value());
  add("vocab", a.vocab.has_value());
  add("requests", a.requests.has_value());
  add("warmup", a.warmup.has_value());
  add("tokenizer", a.tokenizer.has_value());
  add("sentence", a.sentence.has_value());
  add("contract", a.contract.has_value());
  add("repeats", a.repeats.has_value());
  add("reference", a.reference.has_value());
  add("build", a.build.has_value());
  add("out", a.out.has_value());
  add("strip_debug", a.strip_debug);
  add("source", a.source.has_value());
  return given;
}

// A usage error naming the first given flag that `cmd` does not take; OK otherwise.
absl::Status OnlyFlags(const CliArgs& args, const std::vector<std::string>& allowed) {
  for (const std::string& f : GivenFlags(args)) {
    if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", f, " does not apply here"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTimeout(const CliArgs& args) {
  if (args.timeout_s && !(*args.timeout_s > 0)) {
    return absl::InvalidArgumentError("--timeout_s must be positive");
  }
  return absl::OkStatus();
}

// The checks a command that talks to a server makes before connecting, in this order: it is
// given only the flags in `allowed`, no operands, --server, and a positive --timeout_s if any.
// The usage message of the first that fails; OK otherwise.
absl::Status CheckServerCommand(const std::vector<std::string>& operands, const CliArgs& args,
                                const std::vector<std::string>& allowed,
                                const std::string& no_server = "--server is required") {
  if (absl::Status s = OnlyFlags(args, allowed); !s.ok()) return s;
  if (!operands.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", operands[0]));
  }
  if (!args.server) return absl::InvalidArgumentError(no_server);
  return CheckTimeout(args);
}

Seconds UnaryTimeout(const CliArgs& args) {
  return Seconds(args.timeout_s.value_or(kDefaultUnaryTimeoutS));
}

std::string Ms(double seconds) { return absl::StrFormat("%.2f ms", seconds * 1e3); }

nlohmann::json TimingsJson(const v1::Timings& t) {
  return {{"queue", t.queue()},   {"prefill", t.prefill()}, {"ttft", t.ttft()},
          {"decode", t.decode()}, {"tpot", t.tpot()},       {"e2e", t.e2e()}};
}

// ---------------------------------------------------------------------------------- generate --

// Each token's logprob and its alternatives, as [{"id", "logprob", "top": [{"id", "logprob"}]}].
nlohmann::json LogprobsJson(const std::vector<v1::TokenLogprob>& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::TokenLogprob& lp : logprobs) {
    nlohmann::json top = nlohmann::json::array();
    for (const v1::TopLogprob& t : lp.top()) top.push_back({{"id", t.id()}, {"logprob", t.logprob()}});
    out.push_back({{"id", lp.id()}, {"logprob", lp.logprob()}, {"top", top}});
  }
  return out;
}

// Prints a stream as it arrives: text when messages carry it; token ids, space-separated, until
// the first text appears (a server without a tokenizer sends ids only).
class StreamPrinter {
 public:
  explicit StreamPrinter(std::ostream& out) : out_(out) {}
  void OnMessage(const v1::GenerateResponse& msg) {
    if (!msg.text().empty()) {
      if (printed_ids_ && !text_seen_) out_ << ' ';
      out_ << msg.text();
      text_seen_ = true;
      last_ = msg.text().back();
    } else if (!text_seen_) {
      for (int32_t id : msg.token_ids()) {
        out_ << (printed_ids_ ? " " : "") << id;
        printed_ids_ = true;
        last_ = '0';
      }
    }
    out_.flush();
  }
  // Ends the streamed output with a newline when it did not.
  void Finish() {
    if (last_ != '\n' && last_ != '\0') out_ << '\n';
    out_.flush();
  }

 private:
  std::ostream& out_;
  bool text_seen_ = false;
  bool printed_ids_ = false;
  char last_ = '\0';
};

int RunGenerate(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out,
                std::ostream& err) {
  const std::string cmd = "generate";
  if (absl::Status s = CheckServerCommand(operands, args,
                                          {"server", "tokens", "text", "max_tokens", "temperature",
                                           "top_k", "top_p", "seed", "ignore_eos", "stop_token_ids",
                                           "logprobs", "json", "timeout_s"});
      !s.ok()) {
    return Usage(err, cmd, std::string(s.message()));
  }
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(args);
  if (!request.ok()) return Usage(err, cmd, std::string(request.status().message()));
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());

  std::optional<Seconds> timeout;
  if (args.timeout_s) timeout = Seconds(*args.timeout_s);
  StreamPrinter printer(out);
  std::function<void(const v1::GenerateResponse&)> on_message;
  if (!args.json) on_message = [&](const v1::GenerateResponse& m) { printer.OnMessage(m); };
  absl::StatusOr<GenerateResult> result = (*client)->Generate(*request, timeout, on_message);
  if (!args.json) printer.Finish();
  if (!result.ok()) return Fail(err, cmd, result.status());

  const double client_ttft =
      result->arrivals.empty() ? 0 : Seconds(result->arrivals.front().at - result->start).count();
  const double client_e2e = Seconds(result->end - result->start).count();
  if (args.json) {
    nlohmann::json j = {
        {"tokens", result->token_ids},
        {"text", result->text},
        {"finish_reason", FinishReasonName(result->finish_reason)},
        {"usage",
         {{"prompt_tokens", result->usage.prompt_tokens()},
          {"completion_tokens", result->usage.completion_tokens()}}},
        {"timings", TimingsJson(result->timings)},
        {"logprobs", LogprobsJson(result->logprobs)},
        {"client", {{"ttft", client_ttft}, {"e2e", client_e2e}, {"messages", result->arrivals.size()}}},
    };
    out << DumpJson(j) << "\n";
    return kExitOk;
  }
  const v1::Timings& t = result->timings;
  err << "finish " << FinishReasonName(result->finish_reason) << " | prompt "
      << result->usage.prompt_tokens() << " tokens, completion " << result->usage.completion_tokens()
      << " tokens | queue " << Ms(t.queue()) << ", prefill " << Ms(t.prefill()) << ", ttft "
      << Ms(t.ttft()) << ", decode " << Ms(t.decode()) << ", tpot " << Ms(t.tpot()) << ", e2e "
      << Ms(t.e2e()) << " | client ttft " << Ms(client_ttft) << ", e2e " << Ms(client_e2e) << "\n";
  return kExitOk;
}

// ------------------------------------------------------------------------------------ health --

int RunHealth(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out,
              std::ostream& err) {
  const std::string cmd = "health";
  if (absl::Status s = CheckServerCommand(operands, args, {"server", "timeout_s"}); !s.ok()) {
    return Usage(err, cmd, std::string(s.message()));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());

  bool serving = true;
  auto check = [&](const char* label, const std::string& service) {
    absl::StatusOr<HealthStatus::ServingStatus> s = (*client)->CheckHealth(service, UnaryTimeout(args));
    std::string shown;
    if (s.ok()) {
      shown = HealthStatus::ServingStatus_Name(*s);
      if (shown.empty()) shown = absl::StrCat("status ", static_cast<int>(*s));
    } else {
      shown = absl::StrCat(absl::StatusCodeToString(s.status().code()), " (",
                           static_cast<int>(s.status().code()), "): ", s.status().message());
    }
    if (!s.ok() || *s != HealthStatus::SERVING) serving = false;
    out << absl::StrFormat("%-10s %-14s %s\n", label, absl::StrCat("\"", service, "\""), shown);
  };
  check("liveness", "");
  check("readiness", kReadinessService);
  return serving ? kExitOk : kExitFailed;
}

// ---------------------------------------------------------------------------------- manifest --

int RunManifestDiff(const std::vector<std::string>& operands, const CliArgs& args,
                    std::ostream& out, std::ostream& err) {
  const std::string cmd = "manifest";
  if (absl::Status s = OnlyFlags(args, {"diff", "ignore_fields"}); !s.ok()) {
    return Usage(err, cmd, absl::StrCat(s.message(), " (with --diff)"));
  }
  if (operands.size() != 2) return Usage(err, cmd, "--diff takes two files: A.json B.json");
  std::vector<std::string> ignore = absl::StrSplit(args.ignore_fields.value_or("workers.pid"), ',',
                                                   absl::SkipWhitespace());
  for (std::string& f : ignore) f = std::string(absl::StripAsciiWhitespace(f));
  v1::Manifest m[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::string> text = ReadFile(operands[i]);
    if (!text.ok()) return Fail(err, cmd, text.status());
    absl::StatusOr<v1::Manifest> parsed = ManifestFromJson(*text);
    if (!parsed.ok()) {
      return Fail(err, cmd, absl::Status(parsed.status().code(),
                                         absl::StrCat(operands[i], ": ", parsed.status().message())));
    }
    m[i] = *std::move(parsed);
  }
  const std::vector<FieldDiff> diffs = DiffManifests(m[0], m[1], ignore);
  const std::string ignored = ignore.empty() ? "" : absl::StrCat(" (ignoring ", absl::StrJoin(ignore, ", "), ")");
  if (diffs.empty()) {
    out << "manifests match" << ignored << "\n";
    return kExitOk;
  }
  out << "A: " << operands[0] << "\nB: " << operands[1] << "\n";
  Table table({"field", "A", "B"});
  for (const FieldDiff& d : diffs) table.AddRow({d.path, d.a, d.b});
  out << table.Render();
  out << diffs.size() << (diffs.size() == 1 ? " field differs" : " fields differ") << ignored << "\n";
  return kExitFailed;
}

int RunManifest(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out,
                std::ostream& err) {
  if (args.diff) return RunManifestDiff(operands, args, out, err);
  const std::string cmd = "manifest";
  if (absl::Status s = CheckServerCommand(operands, args, {"server", "json", "timeout_s"},
                                          "--server is required (or --diff A.json B.json)");
      !s.ok()) {
    return Usage(err, cmd, std::string(s.message()));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());
  absl::StatusOr<v1::Manifest> manifest = (*client)->GetManifest(UnaryTimeout(args));
  if (!manifest.ok()) return Fail(err, cmd, manifest.status());
  out << (args.json ? ManifestToJson(*manifest) + "\n" : FormatManifestTable(*manifest));
  return kExitOk;
}

// -------------------------------------------------------------------------------------- info --

int RunInfo(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out,
            std::ostream& err) {
  const std::string cmd = "info";
  if (absl::Status s = CheckServerCommand(operands, args, {"server", "json", "timeout_s"}); !s.ok()) {
    return Usage(err, cmd, std::string(s.message()));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());
  absl::StatusOr<v1::Info> info = (*client)->GetInfo(UnaryTimeout(args));
  if (!info.ok()) return Fail(err, cmd, info.status());
  if (args.json) {
    out << ProtoJsonString(*info, true) << "\n";
    return kExitOk;
  }
  // Every field, by reflection, so that fields added to Info show without a change here.
  const google::protobuf::Descriptor* d = info->GetDescriptor();
  const google::protobuf::Reflection* r = info->GetReflection();
  Table table({"field", "value"});
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    std::vector<std::string> values;
    const int n = f->is_repeated() ? r->FieldSize(*info, f) : 1;
    for (int k = 0; k < n; ++k) {
      std::string v;
      if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
        v = f->is_repeated() ? r->GetRepeatedString(*info, f, k) : r->GetString(*info, f);
      } else {
        google::protobuf::TextFormat::PrintFieldValueToString(*info, f, f->is_repeated() ? k : -1, &v);
      }
      values.push_back(std::move(v));
    }
    const std::string value = absl::StrJoin(values, ", ");
    table.AddRow({f->name(), value.empty() ? "-" : value});
  }
  out << table.Render();
  return kExitOk;
}

// ------------------------------------------------------------------------------------- bench --

// bench --contract: the server runs the contract's benchmark; the report is saved after every step.
int RunContractBenchCommand(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out,
                            std::ostream& err) {
  const std::string cmd = "bench";
  if (absl::Status s = OnlyFlags(args, {"server", "contract", "repeats", "reference", "json", "timeout_s"}); !s.ok()) {
    return Usage(err, cmd, absl::StrCat(s.message(), " (with --contract)"));
  }
  if (operands.size() > 1 || (!operands.empty() && !args.json)) {
    return Usage(err, cmd, absl::StrCat("unexpected argument ", operands.back()));
  }
  if (!args.server) return Usage(err, cmd, "--server is required");
  if (args.repeats && *args.repeats < 2) return Usage(err, cmd, "--repeats must be at least 2");
  if (absl::Status s = CheckTimeout(args); !s.ok()) return Usage(err, cmd, std::string(s.message()));
  ContractBenchOptions options;
  absl::StatusOr<std::string> contract = ReadFile(*args.contract);
  if (!contract.ok()) return Fail(err, cmd, contract.status());
  options.contract_json = *std::move(contract);
  options.repeats = args.repeats.value_or(0);
  if (args.reference) {
    absl::StatusOr<std::string> reference = ReadFile(*args.reference);
    if (!reference.ok()) return Fail(err, cmd, reference.status());
    options.reference_json = *std::move(reference);
  }
  if (!operands.empty()) options.report_path = operands[0];
  if (args.timeout_s) options.timeout = Seconds(*args.timeout_s);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());
  ContractBenchResult result =
      RunContractBench(**client, options, [&](const std::string& step) { err << "bench: " << step << "\n"; });
  if (args.json && operands.empty() && !result.report.is_null()) {
    out << DumpJson(result.report) << "\n";
  } else if (!result.report.is_null()) {
    out << FormatContractReport(result.report);
  }
  if (!options.report_path.empty() && !result.report.is_null()) err << "report written to " << options.report_path << "\n";
  if (!result.status.ok()) return Fail(err, cmd, result.status);
  return kExitOk;
}

int RunBenchCommand(const std::vector<std::string>& operands, const CliArgs& args,
                    std::ostream& out, std::ostream& err) {
  if (args.contract) return RunContractBenchCommand(operands, args, out, err);
  const std::string cmd = "bench";
  if (absl::Status s = OnlyFlags(args, {"server", "tokens", "prompt_len", "vocab", "seed",
                                        "max_tokens", "requests", "warmup", "json", "timeout_s",
                                        "tokenizer", "sentence", "logprobs"});
      !s.ok()) {
    return Usage(err, cmd, std::string(s.message()));
  }
  if (operands.size() > 1 || (!operands.empty() && !args.json)) {
    return Usage(err, cmd, absl::StrCat("unexpected argument ", operands.back()));
  }
  if (!args.server) return Usage(err, cmd, "--server is required");
  if (args.tokens.has_value() == args.prompt_len.has_value()) {
    return Usage(err, cmd, "give exactly one of --tokens and --prompt_len");
  }
  if (args.vocab && !args.prompt_len) return Usage(err, cmd, "--vocab goes with --prompt_len");
  if (args.seed && !args.prompt_len) return Usage(err, cmd, "--seed goes with --prompt_len");
  if (args.tokenizer && !args.prompt_len) return Usage(err, cmd, "--tokenizer goes with --prompt_len");
  if (args.sentence && !args.tokenizer) return Usage(err, cmd, "--sentence goes with --tokenizer");
  if (args.tokenizer && (args.vocab || args.seed)) return Usage(err, cmd, "--tokenizer builds the fixed prompt; drop --vocab and --seed");
  if (!args.max_tokens) return Usage(err, cmd, "--max_tokens is required");
  if (*args.max_tokens < 1) return Usage(err, cmd, "--max_tokens must be at least 1");
  if (args.requests.value_or(1) < 1) return Usage(err, cmd, "--requests must be at least 1");
  if (args.warmup.value_or(1) < 0) return Usage(err, cmd, "--warmup must not be negative");
  if (args.prompt_len && *args.prompt_len < 1) return Usage(err, cmd, "--prompt_len must be at least 1");
  if (args.vocab && *args.vocab < 1) return Usage(err, cmd, "--vocab must be at least 1");
  if (absl::Status s = CheckTimeout(args); !s.ok()) return Usage(err, cmd, std::string(s.message()));

  BenchOptions options;
  options.server = *args.server;
  options.max_tokens = *args.max_tokens;
  options.requests = args.requests.value_or(1);
  options.warmup = args.warmup.value_or(1);
  options.logprobs = args.logprobs;
  if (args.timeout_s) options.timeout = Seconds(*args.timeout_s);
  if (args.tokens) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIdList(*args.tokens, "--tokens");
    if (!ids.ok()) return Usage(err, cmd, std::string(ids.status().message()));
    if (ids->empty()) return Usage(err, cmd, "--tokens is empty");
    options.prompt = *std::move(ids);
  }

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(*args.server, args.connect);
  if (!client.ok()) return Fail(err, cmd, client.status());
  // Info and the manifest go into the report; Info also gives the vocabulary and the EOS ids a
  // synthetic prompt avoids.
  const Seconds unary = UnaryTimeout(args);
  absl::StatusOr<v1::Info> info = (*client)->GetInfo(unary);
  if (args.prompt_len && args.tokenizer) {
    // The contract's fixed prompt (docs/contract.md §5.1), tokenized here with the model's tokenizer.
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromDirectory(*args.tokenizer);
    if (!tok.ok()) return Fail(err, cmd, tok.status());
    absl::StatusOr<std::vector<int32_t>> ids =
        FixedPrompt(**tok, args.sentence.value_or(kFixedPromptSentence), *args.prompt_len);
    if (!ids.ok()) return Fail(err, cmd, ids.status());
    options.prompt = *std::move(ids);
  } else if (args.prompt_len) {
    int vocab = args.vocab.value_or(0);
    if (vocab == 0) {
      if (!info.ok()) {
        return Fail(err, cmd, absl::Status(info.status().code(),
                                           absl::StrCat("GetInfo for the vocabulary size (or give --vocab): ",
                                                        info.status().message())));
      }
      vocab = info->vocab_size();
      if (vocab < 1) return Usage(err, cmd, "the server reports no vocabulary size; give --vocab");
    }
    std::vector<int32_t> eos;
    if (info.ok()) eos.assign(info->eos_token_ids().begin(), info->eos_token_ids().end());
    options.prompt = SyntheticPrompt(*args.prompt_len, vocab, eos, args.seed.value_or(0));
    if (static_cast<int>(options.prompt.size()) != *args.prompt_len) {
      return Usage(err, cmd, "cannot draw a prompt from that vocabulary without EOS ids");
    }
  }
  absl::StatusOr<BenchReport> report =
      RunBench(**client, options, [&](const std::string& line) { err << line << "\n"; });
  if (!report.ok()) return Fail(err, cmd, report.status());
  if (info.ok()) report->info = *info;
  if (absl::StatusOr<v1::Manifest> m = (*client)->GetManifest(unary); m.ok()) report->manifest = *m;

  const std::string json = DumpJson(BenchReportJson(*report)) + "\n";
  if (args.json && operands.empty()) {
    out << json;
    return kExitOk;
  }
  out << FormatBenchTable(*report);
  if (!operands.empty()) {
    if (absl::Status s = WriteFileAtomically(operands[0], json); !s.ok()) return Fail(err, cmd, s);
    err << "report written to " << operands[0] << "\n";
  }
  return kExitOk;
}

// ------------------------------------------------------------------------------------ bundle --

int RunBundle(const std::vector<std::string>& operands, const CliArgs& args, std::ostream& out, std::ostream& err) {
  const std::string cmd = "bundle";
  const std::string action = operands.empty() ? "" : operands[0];
  if (action == "create") {
    if (absl::Status s = OnlyFlags(args, {"build", "out", "strip_debug"}); !s.ok()) return Usage(err, cmd, std::string(s.message()));
    if (operands.size() != 1) return Usage(err, cmd, absl::StrCat("unexpected argument ", operands.back()));
    if (!args.build || !args.out) return Usage(err, cmd, "create needs --build DIR and --out DIR");
    absl::StatusOr<Bundle> b = CreateBundle({.build_dir = *args.build, .out = *args.out, .strip_debug = args.strip_debug});
    if (!b.ok()) return Fail(err, cmd, b.status());
    out << "bundle " << b->dir << ": " << b->files.size() << " files, commit " << b->build.source.commit << ", source "
        << b->build.source.fingerprint << "\n";
    return kExitOk;
  }
  if (action == "verify") {
    if (absl::Status s = OnlyFlags(args, {"source"}); !s.ok()) return Usage(err, cmd, std::string(s.message()));
    if (operands.size() != 2) return Usage(err, cmd, "verify takes one bundle directory");
    Bundle b;
    Verdict v = VerifyBundle(operands[1], args.source.value_or(""), &b);
    if (!v.ok()) {
      err << "q38 bundle verify: refused (" << RefusalName(v.refusal) << "): " << v.message << "\n";
      return v.exit_code();
    }
    out << "bundle " << b.dir << " verified: " << b.files.size() << " files, commit " << b.build.source.commit
        << (args.source ? ", source tree unchanged" : "") << "\n";
    return kExitOk;
  }
  return Usage(err, cmd, "give create or verify");
}

}  // namespace

std::string UsageText() {
  return R"(the command line of the q38 inference server.

  q38 generate --server ADDR (--tokens 1,2,3 | --text "...") [--max_tokens N]
               [--temperature T] [--top_k K] [--top_p P] [--seed S] [--ignore_eos]
               [--stop_token_ids 1,2] [--logprobs K] [--json] [--timeout_s S]
  q38 health   --server ADDR [--timeout_s S]
  q38 manifest --server ADDR [--json] [--timeout_s S]
  q38 manifest --diff A.json B.json [--ignore_fields workers.pid,...]
  q38 info     --server ADDR [--json] [--timeout_s S]
  q38 bench    --server ADDR (--tokens 1,2,3 | --prompt_len N [--vocab V] [--seed S])
               --max_tokens N [--requests R] [--warmup W] [--logprobs K] [--json [FILE]] [--timeout_s S]
  q38 bench    --server ADDR --contract FILE [--repeats N] [--reference REPORT] [--json [FILE]]
  q38 bundle create --build DIR --out DIR [--strip_debug]
  q38 bundle verify DIR [--source CHECKOUT]

ADDR is host:port or unix:/path. Exit codes: 0 success, 1 not serving or manifests differ,
64 usage error, 20-26 a refused bundle, otherwise the gRPC status code of the failure.)";
}

std::vector<std::string> NormalizeArgv(std::vector<std::string> argv) {
  std::vector<std::string> out;
  out.reserve(argv.size() + 1);
  for (std::string& a : argv) {
    absl::string_view v = a;
    if ((absl::ConsumePrefix(&v, "--json=") || absl::ConsumePrefix(&v, "-json=")) && !v.empty()) {
      const std::string lower = absl::AsciiStrToLower(v);
      const bool boolean = lower == "true" || lower == "false" || lower == "1" || lower == "0" ||
                           lower == "yes" || lower == "no" || lower == "t" || lower == "f" ||
                           lower == "y" || lower == "n";
      if (!boolean) {
        std::string file(v);
        out.push_back("--json");
        out.push_back(std::move(file));
        continue;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  if (absl::StripAsciiWhitespace(text).empty()) return ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", part, "' is not a token id (want comma-separated integers >= 0)"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const CliArgs& args) {
  if (args.tokens.has_value() == args.text.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --tokens and --text");
  }
  v1::GenerateRequest req;
  if (args.tokens) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIdList(*args.tokens, "--tokens");
    if (!ids.ok()) return ids.status();
    if (ids->empty()) return absl::InvalidArgumentError("--tokens is empty");
    req.mutable_tokens()->mutable_ids()->Add(ids->begin(), ids->end());
  } else {
    req.set_text(*args.text);
  }
  if (args.max_tokens) {
    if (*args.max_tokens < 1) return absl::InvalidArgumentError("--max_tokens must be at least 1");
    req.set_max_tokens(*args.max_tokens);
  }
  if (args.temperature) req.mutable_sampling()->set_temperature(*args.temperature);
  if (args.top_k) req.mutable_sampling()->set_top_k(*args.top_k);
  if (args.top_p) req.mutable_sampling()->set_top_p(*args.top_p);
  if (args.seed) req.mutable_sampling()->set_seed(*args.seed);
  req.set_ignore_eos(args.ignore_eos);
  if (args.logprobs) req.set_logprobs(*args.logprobs);
  if (args.stop_token_ids) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIdList(*args.stop_token_ids, "--stop_token_ids");
    if (!ids.ok()) return ids.status();
    req.mutable_stop_token_ids()->Add(ids->begin(), ids->end());
  }
  return req;
}

int RunCli(const std::vector<std::string>& positional, const CliArgs& args, std::ostream& out,
           std::ostream& err) {
  if (positional.empty()) return Usage(err, "", "missing subcommand\n\n" + UsageText());
  const std::string& cmd = positional[0];
  const std::vector<std::string> operands(positional.begin() + 1, positional.end());
  if (cmd == "generate") return RunGenerate(operands, args, out, err);
  if (cmd == "health") return RunHealth(operands, args, out, err);
  if (cmd == "manifest") return RunManifest(operands, args, out, err);
  if (cmd == "info") return RunInfo(operands, args, out, err);
  if (cmd == "bench") return RunBenchCommand(operands, args, out, err);
  if (cmd == "bundle") return RunBundle(operands, args, out, err);
  return Usage(err, "", absl::StrCat("unknown subcommand '", cmd,
                                     "' (generate, health, manifest, info, bench, bundle)"));
}

}  // namespace q38::client
