// How closely one run's logits follow a reference's, position by position: the measures the GPU
// tests and the precision study (q38-precision-study) report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/tensor_store.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

// A fixed probe sequence of n tokens: ids (i·7919 + 11) mod min(vocab, 1000), spread over the
// vocabulary, with the first EOS id at n/2 (it cuts the PLE n-gram history).
std::vector<int32_t> ProbeSequence(int64_t n, const ModelConfig& config);

// What a teacher-forced run leaves: the logits of every position and, per attention layer, the
// indexer's raw keys of every position. The keys project the layer's normalized input and are
// replicated on every rank, so they show in which layer, and where along the sequence, a run
// departs from another, and whether tensor-parallel ranks still hold the same replica.
struct TeacherForced {
  std::vector<float> logits;                   // [positions, vocab]
  std::vector<int> attention_layers;           // the attention layers, in order
  std::vector<std::vector<float>> index_keys;  // per attention layer: [positions, di]
};

// A run over `ids`: a prefill of `prefill` tokens (the logits of each of its positions), then one
// token at a time, each fed the reference token (teacher forcing); row p of the logits is
// position p. after_step runs on each step's logits buffer once they have been read.
absl::StatusOr<TeacherForced> TeacherForcedRun(Model& model, const std::vector<int32_t>& ids, int64_t prefill,
                                               const std::function<void(Buffer&)>& after_step = {});

// The same on one rank of `backend` with the checkpoint's weights (TP1, no collectives): the
// CPU references, FP32 or under FP16-contract emulation.
absl::StatusOr<TeacherForced> TeacherForcedOnBackend(const ModelConfig& config, const TensorStore& store,
                                                     Backend& backend, const std::vector<int32_t>& ids,
                                                     int64_t prefill, ModelOptions options = {});

struct Agreement {
  int64_t positions = 0;
  double top1 = 0;             // share of positions whose largest logit is the reference's
  // A random model's top two logits are often nearly tied, and there a rounding decides a coin
  // flip: the same share over positions whose reference margin (top-1 minus top-2) exceeds 1%
  // of the position's largest logit magnitude.
  double top1_decided = 0;
  int64_t decided_positions = 0;
  double final_rel_error = 0;  // max |Δ| / max |reference| over the last position's logits
  double median_rel_error = 0, p90_rel_error = 0;  // per position: ‖Δ‖₂ / ‖reference‖₂
  bool finite = true;          // every logit finite
};

// got and reference: [positions, vocab], the same shape.
Agreement CompareLogits(const std::vector<float>& got, const std::vector<float>& reference, int64_t vocab);

std::string Describe(const Agreement& a);

// Where along the sequence `got` departs from the reference: for each of `parts` equal runs of
// positions, in order, the largest per-position relative error and the top-1 misses
// ("0-149: max 1.2e-03, 0 misses; 150-299: ..."). A fault that starts at some position shows as a
// step; rounding noise stays level.
std::string ErrorAlongPositions(const std::vector<float>& got, const std::vector<float>& reference, int64_t vocab,
                                int parts);

// The same for rows that are not logits (the index keys): the largest relative error of each run
// of rows, without top-1 ("0-149: max 1.2e-03; 150-299: ...").
std::string ErrorAlongRows(const std::vector<float>& got, const std::vector<float>& reference, int64_t width,
                           int parts);

// One line per attention layer: `prefix`, "index keys of layer L along the probe: ", and
// ErrorAlongRows of got's keys (width di) against the reference's.
std::string IndexKeysAlongProbe(const TeacherForced& got, const TeacherForced& reference, int64_t di, int parts,
                                const std::string& prefix);

// The first row in which a and b ([rows, width]) differ bitwise, or −1 where none does.
int64_t FirstDifferingRow(const std::vector<float>& a, const std::vector<float>& b, int64_t width);

}  // namespace q38
