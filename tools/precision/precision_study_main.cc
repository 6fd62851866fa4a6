// q38-precision-study: what the GPU's precision contract costs by itself. Runs a checkpoint on
// the CPU twice, in FP32 and under FP16-contract emulation (kernels/fp16_emulation.h), teacher-
// forced over a probe sequence, and reports how closely the emulated logits follow FP32 (the
// emulation sharded over --tp in-process ranks, the reference always at TP1), where along the
// probe they part, and which routing and block-selection decisions the two take differently. With
// --flip_route, the emulated run takes one routing decision the other way, with
// --follow_fp32_decisions every decision as FP32 took it; with --sweep, one row per op with only
// that op's outputs rounded.
#include <algorithm>
#include <iostream>
#include <set>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/status.h"
#include "kernels/fp16_emulation.h"
#include "tools/precision/agreement.h"
#include "tools/precision/decision_record.h"
#include "worker/checkpoint/tensor_store.h"
#include "worker/model/local_group.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (q38-make-checkpoint writes random ones)");
ABSL_FLAG(int64_t, positions, 600, "probe sequence length");
ABSL_FLAG(int64_t, prefill, 64, "tokens prefilled at once before the token-by-token steps");
ABSL_FLAG(std::string, exact_ops, "", "comma-separated ops whose outputs stay FP32");
ABSL_FLAG(int32_t, indexer_budget, 0, "tokens the QSA indexer keeps, in place of the checkpoint's own (0 keeps it)");
ABSL_FLAG(bool, sweep, false, "also one run per op with only that op's outputs rounded");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel ranks of the emulated run (threads of this process)");
ABSL_FLAG(std::string, flip_route, "",
          "LAYER:POSITION: the emulated run sends that token to the router's runner-up in place of its last choice");
ABSL_FLAG(bool, follow_fp32_decisions, false,
          "the emulated run routes every token and selects every block as FP32 did (experts weighted by its own "
          "router logits)");

namespace q38 {
namespace {

absl::Status Main() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) return absl::InvalidArgumentError("--model is required");
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  if (const int32_t budget = absl::GetFlag(FLAGS_indexer_budget); budget != 0) {
    if (budget < 0) return absl::InvalidArgumentError("--indexer_budget must be positive (or 0: the checkpoint's)");
    config.indexer_budget = budget;
    // Back through the parser, so the override meets config.json's own validation.
    ASSIGN_OR_RETURN(config, ParseModelConfig(ModelConfigJson(config)));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TensorStore> store, TensorStore::Open(dir));
  const std::vector<int32_t> ids = ProbeSequence(absl::GetFlag(FLAGS_positions), config);
  const int64_t prefill = absl::GetFlag(FLAGS_prefill);
  const std::vector<std::string>& ops = Fp16EmulationOps();
  std::set<std::string> exact;
  for (absl::string_view op : absl::StrSplit(absl::GetFlag(FLAGS_exact_ops), ',', absl::SkipEmpty())) {
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--exact_ops: no op ", op, " (", absl::StrJoin(ops, ", "), ")"));
    }
    exact.emplace(op);
  }
  std::function<void(Routing&)> flip;
  if (const std::string f = absl::GetFlag(FLAGS_flip_route); !f.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(f, ':');
    int layer = -1;
    int64_t position = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &layer) || !absl::SimpleAtoi(parts[1], &position) ||
        layer < 0 || layer >= config.num_layers || position < 0 || position >= static_cast<int64_t>(ids.size())) {
      return absl::InvalidArgumentError(absl::StrCat("--flip_route ", f, ": want LAYER:POSITION, a layer below ",
                                                     config.num_layers, " and a position below ", ids.size()));
    }
    flip = FlipToRunnerUp(layer, position);
  }
  const bool follow = absl::GetFlag(FLAGS_follow_fp32_decisions);
  if (follow && flip) {
    return absl::InvalidArgumentError("--flip_route and --follow_fp32_decisions: a run follows FP32 or flips, not both");
  }
  auto cpu = MakeCpuBackend();
  DecisionRecorder fp32_decisions;
  ModelOptions recorded;
  InstallDecisionHooks(recorded, {.record = &fp32_decisions});
  ASSIGN_OR_RETURN(const TeacherForced reference,
                   TeacherForcedOnBackend(config, *store, *cpu, ids, prefill, std::move(recorded)));
  const Decisions fp32 = fp32_decisions.decisions();
  const int tp = absl::GetFlag(FLAGS_tp);
  // The emulated run, sharded over --tp ranks, its decisions recorded into `decided` (FP32's
  // taken, or one flipped, where asked).
  const auto emulate = [&](const std::set<std::string>& exact_ops,
                           DecisionRecorder& decided) -> absl::StatusOr<TeacherForced> {
    TeacherForced got;
    LocalGroupOptions o;
    InstallDecisionHooks(o.model, {.follow = follow ? &fp32 : nullptr, .alter = flip, .record = &decided});
    o.cpu_backend = [&] { return MakeFp16EmulationBackend(exact_ops); };
    RETURN_IF_ERROR(RunLocalGroup(config, *store, tp, [&](Model& m) -> absl::Status {
      ASSIGN_OR_RETURN(TeacherForced run, TeacherForcedRun(m, ids, prefill));
      if (m.comm().rank() == 0) got = std::move(run);
      return absl::OkStatus();
    }, o));
    return got;
  };
  DecisionRecorder emulated_decisions;
  ASSIGN_OR_RETURN(const TeacherForced all, emulate(exact, emulated_decisions));
  const std::string what =
      "FP16 contract" + (exact.empty() ? std::string() : " (exact: " + absl::StrJoin(exact, ",") + ")");
  std::cout << what << " against FP32: " << Describe(CompareLogits(all.logits, reference.logits, config.vocab_size))
            << "\n"
            << what << " against FP32 along the probe: "
            << ErrorAlongPositions(all.logits, reference.logits, config.vocab_size, 6) << "\n"
            << IndexKeysAlongProbe(all, reference, config.indexer_head_dim, 6, what + " against FP32, ");
  std::vector<std::string> closest;
  for (const auto& [key, d] : ClosestCalls(fp32, 5)) {
    closest.push_back(absl::StrFormat("layer %d position %d gap %.1e", key.first, key.second, d.gap));
  }
  const Decisions emulated = emulated_decisions.decisions();
  const std::string differences = DecisionDifferences(emulated, fp32);
  std::cout << "FP32 routing decisions nearest a tie (router logit gap): " << absl::StrJoin(closest, "; ") << "\n"
            << what << " decides otherwise than FP32: " << (differences.empty() ? "nowhere" : differences) << "\n"
            << what << " first decides otherwise than FP32: " << Describe(FirstDecisionDifference(emulated, fp32))
            << "\n";
  // The emulated run's arithmetic alone: against FP32 made to take its decisions, and how near a tie
  // each of them was where FP32, in the same state, would have decided otherwise.
  ASSIGN_OR_RETURN(const DecidingAlike alike,
                   TeacherForcedDecidingAs(emulated, config, *store, *cpu, ids, prefill));
  std::cout << what << " against FP32 deciding alike: "
            << Describe(CompareLogits(all.logits, alike.run.logits, config.vocab_size)) << "\n"
            << what << " decides otherwise than FP32 would in the same state: "
            << absl::StrFormat("widest gap %.1f FP16 ulps", WidestGapTakenOtherwise(emulated, alike.own)) << "\n";
  if (!absl::GetFlag(FLAGS_sweep)) return absl::OkStatus();
  std::cout << "only this op rounded          top-1    decided  median err  p90 err\n";
  for (const std::string& op : ops) {
    std::set<std::string> others(ops.begin(), ops.end());
    others.erase(op);
    DecisionRecorder decided;
    ASSIGN_OR_RETURN(const TeacherForced got, emulate(others, decided));
    const Agreement a = CompareLogits(got.logits, reference.logits, config.vocab_size);
    printf("%-28s %7.4f %9.4f %11.2e %9.2e\n", op.c_str(), a.top1, a.top1_decided, a.median_rel_error,
           a.p90_rel_error);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The FP16 contract against FP32 on the CPU: q38-precision-study --model DIR [--sweep] [--exact_ops Linear,...] "
      "[--indexer_budget N] [--tp N] [--flip_route LAYER:POSITION | --follow_fp32_decisions]");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = q38::Main(); !s.ok()) {
    std::cerr << "q38-precision-study: " << s << "\n";
    return 2;
  }
  return 0;
}
