// The PLE block's own ops (MODEL.md §6.2–6.3): the n-gram table gather and the per-stream gate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace q38::cpu {

// The n-gram table as stored: shards of [rows_per_shard, row_width] F8_E4M3, BF16 or F32
// values, concatenated by shard index, times `scale`.
struct PleTable {
  const uint8_t* const* shards;
  int64_t rows_per_shard;
  DType dtype;
  int64_t row_width;
  float scale;  // 1 for BF16/F32 tables
};

// E [T, heads·row_width] = concat_h table[rows[t, h]] · scale, head-major.
void PleGather(const PleTable& table, const int64_t* rows, float* E, int64_t T, int64_t heads);

// a_s = <Kn[s], Qn[s]> / sqrt(H), a_s = sign(a_s)·sqrt(max(|a_s|, 1e-6)), G[s] = sigmoid(a_s)·V.
// Kn, Qn, G [T, S·H]; V [T, H].
void PleGate(const float* kn, const float* qn, const float* v, float* G, int64_t T, int64_t S, int64_t H);

}  // namespace q38::cpu
