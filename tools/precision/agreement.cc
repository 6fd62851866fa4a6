#include "tools/precision/agreement.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "worker/comm/communicator.h"
#include "worker/model/weights.h"

namespace q38 {

std::vector<int32_t> ProbeSequence(int64_t n, const ModelConfig& config) {
  const int64_t spread = std::min<int64_t>(config.vocab_size, 1000);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 11) % spread);
  if (n > 0 && !config.eos_token_ids.empty()) ids[n / 2] = static_cast<int32_t>(config.eos_token_ids[0]);
  return ids;
}

absl::StatusOr<TeacherForced> TeacherForcedRun(Model& model, const std::vector<int32_t>& ids, int64_t prefill,
                                               const std::function<void(Buffer&)>& after_step) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (prefill < 1 || prefill > n) return absl::InvalidArgumentError("prefill must be within the sequence");
  SequenceState state = model.NewSequence(n);
  TeacherForced run;
  absl::StatusOr<Buffer> local = model.Forward({ids.begin(), ids.begin() + prefill}, state, prefill);
  for (int64_t i = prefill;; ++i) {
    if (!local.ok()) return local.status();
    absl::StatusOr<std::vector<float>> logits = model.GatherLogits(*local);
    if (!logits.ok()) return logits.status();
    run.logits.insert(run.logits.end(), logits->begin(), logits->end());
    if (after_step) after_step(*local);
    if (i == n) break;
    local = model.Forward({ids[i]}, state);
  }
  for (size_t i = 0; i < state.attention.size(); ++i) {
    const Buffer& keys = state.attention[i].raw_keys;
    if (!keys) continue;
    run.attention_layers.push_back(static_cast<int>(i));
    run.index_keys.emplace_back(keys.t().numel());
    model.backend().CopyToHost(keys.t(), run.index_keys.back().data());
  }
  return run;
}

absl::StatusOr<TeacherForced> TeacherForcedOnBackend(const ModelConfig& config, const TensorStore& store,
                                                     Backend& backend, const std::vector<int32_t>& ids,
                                                     int64_t prefill, ModelOptions options) {
  auto comm = MakeInProcessGroup(1);
  ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(config, store, backend, {0, 1}));
  Model model(config, std::move(weights), backend, *comm[0], std::move(options));
  return TeacherForcedRun(model, ids, prefill);
}

namespace {

// ‖g − r‖₂ / ‖r‖₂ over one position's logits.
double RelError(const float* g, const float* r, int64_t vocab) {
  double err = 0, norm = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    err += (static_cast<double>(g[v]) - r[v]) * (static_cast<double>(g[v]) - r[v]);
    norm += static_cast<double>(r[v]) * r[v];
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

bool SameTop(const float* g, const float* r, int64_t vocab) {
  return std::max_element(g, g + vocab) - g == std::max_element(r, r + vocab) - r;
}

}  // namespace

Agreement CompareLogits(const std::vector<float>& got, const std::vector<float>& reference, int64_t vocab) {
  Agreement a;
  if (vocab <= 0 || got.size() != reference.size() || got.empty()) return a;
  a.positions = static_cast<int64_t>(reference.size()) / vocab;
  int64_t agree = 0, decided_agree = 0;
  std::vector<double> errors;
  for (int64_t p = 0; p < a.positions; ++p) {
    const float* g = got.data() + p * vocab;
    const float* r = reference.data() + p * vocab;
    const int64_t top = std::max_element(r, r + vocab) - r;
    float second = -INFINITY, scale = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      if (v != top) second = std::max(second, r[v]);
      scale = std::max(scale, std::fabs(r[v]));
      a.finite = a.finite && std::isfinite(g[v]);
    }
    const bool same = SameTop(g, r, vocab);
    agree += same;
    if (r[top] - second > 0.01f * scale) {
      ++a.decided_positions;
      decided_agree += same;
    }
    errors.push_back(RelError(g, r, vocab));
    if (p == a.positions - 1) {
      double diff = 0;
      for (int64_t v = 0; v < vocab; ++v) diff = std::max(diff, std::fabs(static_cast<double>(g[v]) - r[v]));
      a.final_rel_error = scale > 0 ? diff / scale : diff;
    }
  }
  std::sort(errors.begin(), errors.end());
  a.top1 = static_cast<double>(agree) / a.positions;
  a.top1_decided = a.decided_positions ? static_cast<double>(decided_agree) / a.decided_positions : 1.0;
  a.median_rel_error = errors[errors.size() / 2];
  a.p90_rel_error = errors[errors.size() * 9 / 10];
  return a;
}

namespace {

// For each of `parts` equal runs of rows: "begin-end: max E" and, with top1, ", N misses".
std::string Along(const std::vector<float>& got, const std::vector<float>& reference, int64_t width, int parts,
                  bool top1) {
  if (width <= 0 || parts <= 0 || got.size() != reference.size() || got.empty()) return "";
  const int64_t rows = static_cast<int64_t>(reference.size()) / width;
  std::vector<std::string> runs;
  for (int i = 0; i < parts; ++i) {
    const int64_t begin = rows * i / parts, end = rows * (i + 1) / parts;
    if (begin == end) continue;
    double worst = 0;
    int64_t misses = 0;
    for (int64_t p = begin; p < end; ++p) {
      const float *g = got.data() + p * width, *r = reference.data() + p * width;
      worst = std::max(worst, RelError(g, r, width));
      misses += !SameTop(g, r, width);
    }
    runs.push_back(absl::StrFormat("%d-%d: max %.1e", begin, end - 1, worst) +
                   (top1 ? absl::StrFormat(", %d misses", misses) : ""));
  }
  return absl::StrJoin(runs, "; ");
}

}  // namespace

std::string ErrorAlongPositions(const std::vector<float>& got, const std::vector<float>& reference, int64_t vocab,
                                int parts) {
  return Along(got, reference, vocab, parts, /*top1=*/true);
}

std::string ErrorAlongRows(const std::vector<float>& got, const std::vector<float>& reference, int64_t width,
                           int parts) {
  return Along(got, reference, width, parts, /*top1=*/false);
}

std::string IndexKeysAlongProbe(const TeacherForced& got, const TeacherForced& reference, int64_t di, int parts,
                                const std::string& prefix) {
  std::string out;
  for (size_t k = 0; k < got.index_keys.size() && k < reference.index_keys.size(); ++k) {
    absl::StrAppend(&out, prefix, "index keys of layer ", got.attention_layers[k], " along the probe: ",
                    ErrorAlongRows(got.index_keys[k], reference.index_keys[k], di, parts), "\n");
  }
  return out;
}

int64_t FirstDifferingRow(const std::vector<float>& a, const std::vector<float>& b, int64_t width) {
  if (width <= 0) return -1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i) / width;
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n) / width;
}

std::string Describe(const Agreement& a) {
  return absl::StrFormat(
      "top-1 agreement %.4f over %d positions, %.4f over the %d with a margin above 1%%; logits relative error "
      "median %.2e, p90 %.2e, final position %.3e",
      a.top1, a.positions, a.top1_decided, a.decided_positions, a.median_rel_error, a.p90_rel_error,
      a.final_rel_error);
}

}  // namespace q38
