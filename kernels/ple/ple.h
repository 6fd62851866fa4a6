// The PLE block's own ops (docs/model.md §6.2–6.3): the n-gram table gather and the per-stream gate.
// The table stays in host memory on every backend (docs/design.md §6), so the gather has a host half
// (PleStageRows copies the rows a step reads into staging memory) and a backend half (PleLoad
// converts the staged values to activations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"

namespace q38 {

// The n-gram table as stored: shards of [rows_per_shard, row_width] F8_E4M3, BF16 or F32
// values, concatenated by shard index, times `scale`.
struct PleTable {
  std::vector<const uint8_t*> shards;
  int64_t rows_per_shard = 0;
  DType dtype = DType::kF8E4M3;
  int64_t row_width = 0;
  float scale = 1.0f;  // 1 for BF16/F32 tables
  std::shared_ptr<const void> owner;  // the memory of a table not mapped from a checkpoint
};

// staged = the stored bytes of rows[0..n), one row after another.
void PleStageRows(const PleTable& table, const int64_t* rows, int64_t n, uint8_t* staged);

}  // namespace q38

namespace q38::cpu {

// E[i] = staged[i] · scale for n values stored as `dtype` (F8_E4M3, BF16 or F32).
void PleLoad(const uint8_t* staged, DType dtype, float scale, float* E, int64_t n);

// a_s = <Kn[s], Qn[s]> / sqrt(H), a_s = sign(a_s)·sqrt(max(|a_s|, 1e-6)), G[s] = sigmoid(a_s)·V.
// Kn, Qn, G [T, S·H]; V [T, H].
void PleGate(const float* kn, const float* qn, const float* v, float* G, int64_t T, int64_t S, int64_t H);

}  // namespace q38::cpu
