// The discrete decisions of a run, for precision studies: every MoE layer's choice of experts
// (with how close the router came to choosing otherwise) and every attention layer's choice of
// indexer blocks, at every position. Where the FP32 reference and an FP16 run face a near tie,
// rounding decides it, and the other choice differs by a whole expert or block from there on,
// which no rounding bound covers. These find such decisions, force one, or make a run take the
// reference's (ModelOptions::routing and ::selection).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/precision/agreement.h"
#include "worker/checkpoint/tensor_store.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

struct RouteDecision {
  std::vector<int32_t> chosen;  // the experts, ascending
  float gap = 0;                // the k-th largest router logit minus the (k+1)-th
  float logit = 0;              // the k-th largest router logit

  // The gap in units of the FP16 spacing at the k-th logit: how many roundings apart the two
  // sides of the decision lie.
  float gap_in_fp16_ulps() const;
};

using DecisionKey = std::pair<int, int64_t>;  // (layer, position)

struct Decisions {
  std::map<DecisionKey, RouteDecision> routes;             // MoE layers
  std::map<DecisionKey, std::vector<int32_t>> selections;  // attention layers: the indexer's blocks
};

// Records rank 0's decisions; thread-safe, so one recorder can serve every rank of a group.
class DecisionRecorder {
 public:
  Decisions decisions() const;
  void Record(const Routing& r);
  void Record(const Selection& s);

 private:
  mutable std::mutex mu_;
  Decisions decisions_;
};

// What a run's decision hooks do, in this order: record in `own` what the run itself would
// decide; take `follow`'s decision wherever the run would decide otherwise (experts weighted by
// the run's own router logits: the router's softmax renormalized over them), so that it differs
// from `follow`'s run only by its arithmetic; apply `alter` to each routing (FlipToRunnerUp);
// record in `record` what the run then decides.
struct DecisionHooks {
  const Decisions* follow = nullptr;
  std::function<void(Routing&)> alter;
  DecisionRecorder* record = nullptr;
  DecisionRecorder* own = nullptr;
};

// Sets options.routing and options.selection to the hooks.
void InstallDecisionHooks(ModelOptions& options, const DecisionHooks& hooks);

// Sends the token at `position` in MoE layer `layer` to the router's runner-up in place of its
// k-th choice, weighted as the router would have: the other side of that decision.
std::function<void(Routing&)> FlipToRunnerUp(int layer, int64_t position);

// Every decision of `got` that differs from the reference's, in layer and position order,
// experts first ("experts at layer L position P (reference gap G), ..., blocks at layer L
// position P"; "" where none does).
std::string DecisionDifferences(const Decisions& got, const Decisions& reference);

// The first decision along the sequence that `got` takes otherwise than the reference: at the
// lowest position, the lowest layer, and within a layer the block selection before the routing
// (attention runs before the layer's experts). One decision taken otherwise moves everything
// after it, so only the first must have been a near tie.
struct FirstDifference {
  bool found = false;
  bool routing = false;  // else a block selection
  DecisionKey key;
  RouteDecision reference;  // routing: the reference's decision there
};
FirstDifference FirstDecisionDifference(const Decisions& got, const Decisions& reference);
// As DecisionDifferences names it, or "nowhere".
std::string Describe(const FirstDifference& f);

// Of the routing decisions `got` takes otherwise than the reference, the one whose reference gap
// is widest, in FP16 spacings (0 where none differs). With a reference that followed `got`'s
// decisions and kept its own in DecisionHooks::own, every decision compared was taken from the
// same state, so each must have been a near tie, not only the first.
float WidestGapTakenOtherwise(const Decisions& got, const Decisions& reference);

// A teacher-forced run on one rank of `backend` (TeacherForcedOnBackend) that takes `taken`'s
// decisions, and what it would have decided itself at each of them: the reference a run that
// decided freely is judged against by its arithmetic alone.
struct DecidingAlike {
  TeacherForced run;
  Decisions own;
};
absl::StatusOr<DecidingAlike> TeacherForcedDecidingAs(const Decisions& taken, const ModelConfig& config,
                                                      const TensorStore& store, Backend& backend,
                                                      const std::vector<int32_t>& ids, int64_t prefill);

// The n routing decisions nearest a tie, closest first.
std::vector<std::pair<DecisionKey, RouteDecision>> ClosestCalls(const Decisions& d, size_t n);

}  // namespace q38
