#include "worker/model/routing_record.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace q38 {
namespace {

// Token t's experts by router logit, largest first (ties to the lower id, as the router).
std::vector<int32_t> ByLogit(const Routing& r, int64_t t) {
  std::vector<int32_t> order(r.experts);
  std::iota(order.begin(), order.end(), 0);
  const float* l = r.logits.data() + t * r.experts;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return order;
}

// Sends token t to `experts` (k of them) with the router's weights for them: softmax
// probabilities renormalized over the k.
void Choose(Routing& r, int64_t t, const std::vector<int32_t>& experts) {
  const float* l = r.logits.data() + t * r.experts;
  float top = l[experts[0]];
  for (int32_t e : experts) top = std::max(top, l[e]);
  double sum = 0;
  for (int32_t e : experts) sum += std::exp(static_cast<double>(l[e]) - top);
  for (int64_t j = 0; j < r.k; ++j) {
    r.chosen[t * r.k + j] = experts[j];
    r.weights[t * r.k + j] = static_cast<float>(std::exp(static_cast<double>(l[experts[j]]) - top) / sum);
  }
}

}  // namespace

std::function<void(Routing&)> RoutingRecorder::Observer() {
  return [this](Routing& r) {
    if (r.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t t = 0; t < r.tokens; ++t) {
      RouteDecision d;
      d.chosen.assign(r.chosen.begin() + t * r.k, r.chosen.begin() + (t + 1) * r.k);
      std::sort(d.chosen.begin(), d.chosen.end());
      if (r.k < r.experts) {
        const std::vector<int32_t> order = ByLogit(r, t);
        const float* l = r.logits.data() + t * r.experts;
        d.gap = l[order[r.k - 1]] - l[order[r.k]];
      }
      decisions_[{r.layer, r.first_position + t}] = std::move(d);
    }
  };
}

RouteDecisions RoutingRecorder::decisions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_;
}

std::function<void(Routing&)> FlipToRunnerUp(int layer, int64_t position) {
  return [layer, position](Routing& r) {
    const int64_t t = position - r.first_position;
    if (r.layer != layer || t < 0 || t >= r.tokens || r.k >= r.experts) return;
    std::vector<int32_t> order = ByLogit(r, t);
    std::swap(order[r.k - 1], order[r.k]);
    order.resize(r.k);
    Choose(r, t, order);
  };
}

std::function<void(Routing&)> FollowRouting(RouteDecisions reference) {
  return [reference = std::move(reference)](Routing& r) {
    for (int64_t t = 0; t < r.tokens; ++t) {
      auto it = reference.find({r.layer, r.first_position + t});
      if (it == reference.end() || static_cast<int64_t>(it->second.chosen.size()) != r.k) continue;
      std::vector<int32_t> mine(r.chosen.begin() + t * r.k, r.chosen.begin() + (t + 1) * r.k);
      std::sort(mine.begin(), mine.end());
      if (mine != it->second.chosen) Choose(r, t, it->second.chosen);  // else the router's own weights stand
    }
  };
}

std::string RoutingDifferences(const RouteDecisions& got, const RouteDecisions& reference) {
  std::vector<std::string> out;
  for (const auto& [key, d] : got) {
    auto it = reference.find(key);
    if (it == reference.end() || it->second.chosen == d.chosen) continue;
    out.push_back(absl::StrFormat("layer %d position %d (FP32 gap %.1e)", key.first, key.second, it->second.gap));
  }
  return absl::StrJoin(out, ", ");
}

std::vector<std::pair<RouteKey, RouteDecision>> ClosestCalls(const RouteDecisions& d, size_t n) {
  std::vector<std::pair<RouteKey, RouteDecision>> all(d.begin(), d.end());
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second.gap < b.second.gap; });
  all.resize(std::min(n, all.size()));
  return all;
}

}  // namespace q38
