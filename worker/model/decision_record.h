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

#include "worker/model/qwen4_exp.h"

namespace q38 {

struct RouteDecision {
  std::vector<int32_t> chosen;  // the experts, ascending
  float gap = 0;                // the k-th largest router logit minus the (k+1)-th
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

 private:
  friend void Steer(ModelOptions&, const Decisions*, DecisionRecorder*);
  void Record(const Routing& r);
  void Record(const Selection& s);

  mutable std::mutex mu_;
  Decisions decisions_;
};

// Sets `options`' hooks so that a run takes `follow`'s decision wherever it would decide
// otherwise (experts weighted by the run's own router logits: the router's softmax renormalized
// over them), then records what it decided into `record`. Either may be null. The run then
// differs from `follow`'s only by its arithmetic.
void Steer(ModelOptions& options, const Decisions* follow, DecisionRecorder* record);

// A routing hook that sends the token at `position` in MoE layer `layer` to the router's
// runner-up in place of its k-th choice, weighted as the router would have: the other side of
// that decision.
std::function<void(Routing&)> FlipToRunnerUp(int layer, int64_t position);

// Every decision of `got` that differs from the reference's, in layer and position order,
// experts first ("experts at layer L position P (FP32 gap G), ..., blocks at layer L position
// P"; "" where none does).
std::string DecisionDifferences(const Decisions& got, const Decisions& reference);

// The n routing decisions nearest a tie, closest first.
std::vector<std::pair<DecisionKey, RouteDecision>> ClosestCalls(const Decisions& d, size_t n);

}  // namespace q38
