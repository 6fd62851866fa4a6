// Decode attention (a few queries) split across the context: the query heads that share a KV head
// take one block per split of 32 attended tokens, so each key and value row is read from memory
// once per KV head instead of once per query head, and a block's tokens are scored at once.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_cuda.h"

namespace q38::cuda {

// Attended tokens a split takes: one per lane of the scoring warp.
constexpr int64_t kDecodeSplitTokens = 32;

// True when this kernel serves the shapes and alignment: head_dim 32, 64, 128 or 256, at most
// 16 query heads per KV head, 16-byte aligned q and caches.
bool DecodeAttentionFits(const __half* q, const __half* kcache, const __half* vcache, const SelectedAttentionDims& d);

// Each (query, query head, split)'s maximum, sum and unnormalized output into part, as
// AttentionMerge reads them; with one split, the output itself into o.
void DecodeAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                     const int64_t* positions, __half* o, float* part, int64_t T, int64_t splits,
                     const SelectedAttentionDims& d, cudaStream_t stream);

}  // namespace q38::cuda
