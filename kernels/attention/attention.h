// Attention over a QSA selection, and the QSA indexer that makes the selection (docs/model.md §8).
#pragma once

#include <cstdint>

namespace q38::cpu {

// Pools complete blocks [first, first+count) of raw indexer keys raw [ctx, di]: the mean of the
// block's `ratio` keys, zero-centred RMSNorm with knorm_w, RoPE at the block's start position.
// Writes pooled [first+count, di] rows first..first+count-1.
void IndexerPoolBlocks(const float* raw, const float* knorm_w, float* pooled, int64_t first,
                       int64_t count, int64_t di, int64_t ratio, float eps, int64_t rotary_dim,
                       double theta);

// For each query t at position positions[t]: scores every complete visible block b < (p+1)/ratio
// as Σ_h relu(iq[t,h]·pooled[b]) / sqrt(di) and keeps the top `max_blocks` (score descending,
// then block id ascending). sel [T, max_blocks] receives the chosen block ids in ascending id
// order, −1 past the end. When all visible blocks fit, all are chosen (dense attention).
void IndexerSelect(const float* iq, const float* pooled, const int64_t* positions, int32_t* sel,
                   int64_t T, int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks);

struct AttentionDims {
  int64_t q_heads;   // local query heads
  int64_t kv_heads;  // local KV heads; query head h reads kv head h / (q_heads / kv_heads)
  int64_t head_dim;
  int64_t ratio;       // tokens per indexer block
  int64_t max_blocks;  // columns of sel
};

// q [T, Hq, dh]; kcache, vcache [ctx, Hkv, dh] holding every position up to the query's.
// Query t attends the tokens of its selected blocks plus the tail [ratio·⌊(p+1)/ratio⌋, p].
// Softmax of q·k / sqrt(dh) in FP32. o [T, Hq, dh].
void SelectedAttention(const float* q, const float* kcache, const float* vcache,
                       const int32_t* sel, const int64_t* positions, float* o, int64_t T,
                       const AttentionDims& d);

}  // namespace q38::cpu
