// Q38.Benchmark: the contract benchmark (server/benchmark.h) bound to the scheduler. The contract
// is checked against the served manifest first and the call fails closed naming every differing
// field; then the benchmark holds the scheduler (ordinary requests wait) and streams the whole
// report after every step.
#include "absl/strings/str_cat.h"
#include "proto/enum_names.h"
#include "proto/proto_json.h"
#include "server/benchmark.h"
#include "server/contract.h"
#include "server/service.h"

namespace q38 {
namespace {

// A benchmark holds the whole server; a bound keeps one call from holding it for days.
constexpr int32_t kMaxBenchmarkRepeats = 100;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<BenchmarkCaseGauges> CaseGauges(const nlohmann::json& report) {
  std::vector<BenchmarkCaseGauges> out;
  for (const nlohmann::json& c : report["cases"]) {
    if (!c.contains("summary")) continue;  // the case did not finish
    const nlohmann::json& s = c["summary"];
    out.push_back({c["name"], s["decode_tps"]["mean"], s["prefill_tps"]["mean"], s["tpot_ms"]["mean"].get<double>() / 1e3,
                   s["ttft_s"]["mean"]});
  }
  return out;
}

}  // namespace

void Q38Service::RunToCompletion(MessageWriter<v1::BenchmarkProgress>& writer, const std::shared_ptr<Job>& job) {
  bool cancelled = false;  // guarded by job->mu
  writer.OnCancelled([&] {
    std::lock_guard<std::mutex> l(job->mu);
    cancelled = true;
    job->cv.notify_all();
  });
  bool left;
  {
    std::unique_lock<std::mutex> l(job->mu);
    job->cv.wait(l, [&] { return job->done || cancelled; });
    left = !job->done;
  }
  writer.OnCancelled(nullptr);
  if (!left) return;
  // The client left: the job stops within a step, and the benchmark with it.
  scheduler_.Cancel(job, worker::v1::CANCEL_REASON_CLIENT);
  std::unique_lock<std::mutex> l(job->mu);
  job->cv.wait(l, [&] { return job->done; });
}

grpc::Status Q38Service::DoBenchmark(grpc::ServerContextBase* ctx, const v1::BenchmarkRequest* req,
                                     MessageWriter<v1::BenchmarkProgress>* writer) {
  absl::StatusOr<Contract> contract = ParseContract(req->contract_json());
  if (!contract.ok()) return ToGrpc(absl::InvalidArgumentError(absl::StrCat("contract_json: ", contract.status().message())));
  if (absl::Status s = CheckContract(*contract, manifest()); !s.ok()) return ToGrpc(s);
  if (req->repeats() < 0) return ToGrpc(absl::InvalidArgumentError("repeats: must not be negative"));
  if (req->repeats() > kMaxBenchmarkRepeats) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("repeats: at most ", kMaxBenchmarkRepeats, ", got ", req->repeats())));
  }
  BenchmarkPlan plan;
  plan.contract = *contract;
  plan.contract_json = nlohmann::json::parse(req->contract_json());
  plan.repeats = req->repeats() == 0 ? contract->benchmark.repeats : req->repeats();
  if (!req->reference_json().empty()) {
    plan.reference = nlohmann::json::parse(req->reference_json(), nullptr, /*allow_exceptions=*/false);
    if (plan.reference->is_discarded()) return ToGrpc(absl::InvalidArgumentError("reference_json: not valid JSON"));
  }
  plan.tokenizer = info_.tokenizer;
  plan.generation = info_.generation;
  plan.build = info_.build;
  plan.manifest = ProtoJson(manifest());

  auto run = [&](const BenchRequest& r) -> absl::StatusOr<BenchResult> {
    if (ctx->IsCancelled()) return absl::CancelledError("the client went away");
    if (absl::Status s = ValidatePrompt(r.prompt, r.max_tokens, info_.limits); !s.ok()) return s;
    auto job = std::make_shared<Job>();
    job->id = generations_.NextJobId();
    job->benchmark = true;
    job->prompt = r.prompt;
    job->sampling.set_temperature(r.temperature);
    job->sampling.set_top_p(r.top_p);
    job->sampling.set_top_k(r.top_k);
    job->sampling.set_seed(r.seed);
    job->max_tokens = r.max_tokens;
    job->eos_ids.insert(info_.eos_ids.begin(), info_.eos_ids.end());
    if (!r.ignore_eos) job->stop_ids = job->eos_ids;
    job->received = Clock::now();
    if (absl::Status s = scheduler_.Submit(job); !s.ok()) return s;
    RunToCompletion(*writer, job);
    std::lock_guard<std::mutex> l(job->mu);
    if (job->finish_reason == v1::FINISH_REASON_ERROR) return job->error;
    if (job->finish_reason == v1::FINISH_REASON_CANCELLED) {
      return absl::CancelledError(absl::StrCat("cancelled by ", CancelReasonName(job->cancel_by)));
    }
    BenchResult out;
    out.tokens.assign(job->tokens.begin(), job->tokens.end());
    out.finish_reason = job->finish_reason;
    out.queued_s = Seconds(job->received, job->scheduled);
    if (job->generated > 0) {
      out.prefill_s = Seconds(job->scheduled, job->first_token);
      out.decode_s = Seconds(job->first_token, job->last_token);
      out.e2e_s = Seconds(job->received, job->last_token);
    }
    return out;
  };
  auto refresh = [&]() -> absl::StatusOr<nlohmann::json> {
    absl::StatusOr<v1::Manifest> m = info_.refresh_manifest();
    if (!m.ok()) return m.status();
    if (absl::Status s = CheckContract(*contract, *m); !s.ok()) return s;
    {
      std::lock_guard<std::mutex> l(mu_);
      info_.manifest = *m;
    }
    return ProtoJson(*m);
  };
  auto on_step = [&](const std::string& step, const nlohmann::json& report) {
    v1::BenchmarkProgress p;
    p.set_step(step);
    p.set_report_json(report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    p.set_done(step == "done");
    writer->Write(p);
  };
  class Benchmark bench(std::move(plan), run, refresh, on_step);
  if (absl::Status s = bench.Validate(); !s.ok()) return ToGrpc(s);
  absl::Status status;
  {
    absl::StatusOr<BenchmarkHold> hold = scheduler_.BeginBenchmark();
    if (!hold.ok()) return ToGrpc(hold.status());
    metrics_.SetContract(contract->name, contract->sha256);
    status = bench.Run();
  }
  metrics_.SetLastBenchmark(CaseGauges(bench.report()), status.ok(), bench.report()["ended_unix"].get<double>());
  return ToGrpc(status);
}

}  // namespace q38
