// Prefill attention on tensor cores: the query heads that share a KV head attend together, so
// each key and value row is read once per (query, KV head) rather than once per query head.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_cuda.h"

namespace q38::cuda {

// True when this kernel serves the shapes and alignment: head_dim 32, 64, 128 or 256, at most
// 16 query heads per KV head, 16-byte aligned q and caches.
bool GroupedAttentionFits(const __half* q, const __half* kcache, const __half* vcache, const SelectedAttentionDims& d);

// As SelectedAttention with one split; only where GroupedAttentionFits.
void GroupedAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                      const int64_t* positions, __half* o, int64_t T, const SelectedAttentionDims& d,
                      cudaStream_t stream);

}  // namespace q38::cuda
