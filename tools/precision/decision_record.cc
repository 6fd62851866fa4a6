#include "tools/precision/decision_record.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace q38 {
namespace {

// Token t's experts by router logit, largest first (ties to the lower id).
std::vector<int32_t> ByLogit(const Routing& r, int64_t t) {
  std::vector<int32_t> order(r.experts);
  std::iota(order.begin(), order.end(), 0);
  const float* l = r.logits.data() + t * r.experts;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return order;
}

std::vector<int32_t> ChosenSorted(const Routing& r, int64_t t) {
  std::vector<int32_t> c(r.chosen.begin() + t * r.k, r.chosen.begin() + (t + 1) * r.k);
  std::sort(c.begin(), c.end());
  return c;
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

void Follow(const Decisions& reference, Routing& r) {
  for (int64_t t = 0; t < r.tokens; ++t) {
    auto it = reference.routes.find({r.layer, r.first_position + t});
    if (it == reference.routes.end() || static_cast<int64_t>(it->second.chosen.size()) != r.k) continue;
    if (ChosenSorted(r, t) != it->second.chosen) Choose(r, t, it->second.chosen);  // else the router's weights stand
  }
}

void Follow(const Decisions& reference, Selection& s) {
  for (int64_t t = 0; t < s.tokens; ++t) {
    auto it = reference.selections.find({s.layer, s.first_position + t});
    if (it == reference.selections.end() || static_cast<int64_t>(it->second.size()) != s.slots) continue;
    std::copy(it->second.begin(), it->second.end(), s.blocks.begin() + t * s.slots);
  }
}

std::string ExpertsAt(const DecisionKey& key, const RouteDecision& reference) {
  return absl::StrFormat("experts at layer %d position %d (reference gap %.1e, %.1f FP16 ulps)", key.first,
                         key.second, reference.gap, reference.gap_in_fp16_ulps());
}

std::string BlocksAt(const DecisionKey& key) {
  return absl::StrFormat("blocks at layer %d position %d", key.first, key.second);
}

}  // namespace

float RouteDecision::gap_in_fp16_ulps() const {
  // FP16 keeps 10 fraction bits; below 2⁻¹⁴ the spacing stays 2⁻²⁴.
  const int exponent = std::ilogb(std::max(std::fabs(logit), 0x1p-14f));
  return gap / std::ldexp(1.0f, exponent - 10);
}

void DecisionRecorder::Record(const Routing& r) {
  if (r.rank != 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t t = 0; t < r.tokens; ++t) {
    RouteDecision d{ChosenSorted(r, t), 0, 0};
    const std::vector<int32_t> order = ByLogit(r, t);
    const float* l = r.logits.data() + t * r.experts;
    d.logit = l[order[r.k - 1]];
    if (r.k < r.experts) d.gap = d.logit - l[order[r.k]];
    decisions_.routes[{r.layer, r.first_position + t}] = std::move(d);
  }
}

void DecisionRecorder::Record(const Selection& s) {
  if (s.rank != 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t t = 0; t < s.tokens; ++t) {
    decisions_.selections[{s.layer, s.first_position + t}].assign(s.blocks.begin() + t * s.slots,
                                                                  s.blocks.begin() + (t + 1) * s.slots);
  }
}

Decisions DecisionRecorder::decisions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_;
}

void InstallDecisionHooks(ModelOptions& options, const DecisionHooks& hooks) {
  // Each rank's model holds its own copy of the hooks: the reference is copied in, read only.
  std::shared_ptr<const Decisions> follow = hooks.follow ? std::make_shared<Decisions>(*hooks.follow) : nullptr;
  options.routing = [follow, alter = hooks.alter, record = hooks.record, own = hooks.own](Routing& r) {
    if (own) own->Record(r);
    if (follow) Follow(*follow, r);
    if (alter) alter(r);
    if (record) record->Record(r);
  };
  options.selection = [follow, record = hooks.record, own = hooks.own](Selection& s) {
    if (own) own->Record(s);
    if (follow) Follow(*follow, s);
    if (record) record->Record(s);
  };
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

std::string DecisionDifferences(const Decisions& got, const Decisions& reference) {
  std::vector<std::string> out;
  for (const auto& [key, d] : got.routes) {
    auto it = reference.routes.find(key);
    if (it == reference.routes.end() || it->second.chosen == d.chosen) continue;
    out.push_back(ExpertsAt(key, it->second));
  }
  for (const auto& [key, blocks] : got.selections) {
    auto it = reference.selections.find(key);
    if (it == reference.selections.end() || it->second == blocks) continue;
    out.push_back(BlocksAt(key));
  }
  return absl::StrJoin(out, ", ");
}

FirstDifference FirstDecisionDifference(const Decisions& got, const Decisions& reference) {
  FirstDifference first;
  // Order along the sequence: position, layer, then selection (0) before routing (1).
  const auto offer = [&first](const DecisionKey& key, bool routing, const RouteDecision& d) {
    const auto rank = [](const DecisionKey& k, bool r) { return std::make_tuple(k.second, k.first, r); };
    if (first.found && rank(first.key, first.routing) <= rank(key, routing)) return;
    first = {true, routing, key, d};
  };
  for (const auto& [key, d] : reference.routes) {
    auto it = got.routes.find(key);
    if (it != got.routes.end() && it->second.chosen != d.chosen) offer(key, true, d);
  }
  for (const auto& [key, blocks] : reference.selections) {
    auto it = got.selections.find(key);
    if (it != got.selections.end() && it->second != blocks) offer(key, false, {});
  }
  return first;
}

std::string Describe(const FirstDifference& f) {
  if (!f.found) return "nowhere";
  return f.routing ? ExpertsAt(f.key, f.reference) : BlocksAt(f.key);
}

float WidestGapTakenOtherwise(const Decisions& got, const Decisions& reference) {
  float widest = 0;
  for (const auto& [key, d] : got.routes) {
    auto it = reference.routes.find(key);
    if (it != reference.routes.end() && it->second.chosen != d.chosen) {
      widest = std::max(widest, it->second.gap_in_fp16_ulps());
    }
  }
  return widest;
}

absl::StatusOr<DecidingAlike> TeacherForcedDecidingAs(const Decisions& taken, const ModelConfig& config,
                                                      const TensorStore& store, Backend& backend,
                                                      const std::vector<int32_t>& ids, int64_t prefill) {
  DecisionRecorder own;
  ModelOptions options;
  InstallDecisionHooks(options, {.follow = &taken, .own = &own});
  absl::StatusOr<TeacherForced> run = TeacherForcedOnBackend(config, store, backend, ids, prefill, options);
  if (!run.ok()) return run.status();
  return DecidingAlike{std::move(*run), own.decisions()};
}

std::vector<std::pair<DecisionKey, RouteDecision>> ClosestCalls(const Decisions& d, size_t n) {
  std::vector<std::pair<DecisionKey, RouteDecision>> all(d.routes.begin(), d.routes.end());
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second.gap < b.second.gap; });
  all.resize(std::min(n, all.size()));
  return all;
}

}  // namespace q38
