// Routing decisions of a run, for precision studies: every MoE layer's choice of experts at every
// position, with how close the router came to choosing otherwise. A GPU run and the FP32
// reference that choose differently at a near tie differ by a whole expert from there on, which
// no rounding bound covers; these find such decisions and can force one (ModelOptions::routing).
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

// (layer, position) → decision.
using RouteKey = std::pair<int, int64_t>;
using RouteDecisions = std::map<RouteKey, RouteDecision>;

// Records rank 0's decisions; thread-safe, so one recorder can serve every rank of a group.
class RoutingRecorder {
 public:
  // The ModelOptions::routing observer that records into this recorder.
  std::function<void(Routing&)> Observer();
  RouteDecisions decisions() const;

 private:
  mutable std::mutex mu_;
  RouteDecisions decisions_;
};

// Sends the token at `position` in MoE layer `layer` to the router's runner-up in place of its
// k-th choice, reweighting the k as the router would have: the other side of that decision.
std::function<void(Routing&)> FlipToRunnerUp(int layer, int64_t position);

// Makes every decision as `reference` made it: where this run's router chose other experts, it
// takes the reference's, weighted by this run's own router logits (the router's softmax,
// renormalized over them). The run then differs from the reference only by its arithmetic, not
// by which experts a near tie sent a token to.
std::function<void(Routing&)> FollowRouting(RouteDecisions reference);

// "Layer L position P" for every decision of `got` whose experts differ from the reference's,
// with the reference's gap, in layer and position order ("" where none does).
std::string RoutingDifferences(const RouteDecisions& got, const RouteDecisions& reference);

// The n decisions of `d` nearest a tie, closest first.
std::vector<std::pair<RouteKey, RouteDecision>> ClosestCalls(const RouteDecisions& d, size_t n);

}  // namespace q38
