// QSA on the GPU (docs/model.md §8), as kernels/attention/attention.h: the indexer's block pooling
// and top-k selection, and attention over the selection split across the context.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

// Pools the block a token at positions[t] completes, if it completes one.
void IndexerPoolBlocks(const __half* raw, const __half* knorm_w, __half* pooled, const int64_t* positions,
                       int64_t T, int64_t di, int64_t ratio, float eps, int64_t rotary_dim, double theta,
                       cudaStream_t stream);

// scratch: F32 [T, max_visible_blocks] (block scores of each query).
void IndexerSelect(const __half* iq, const __half* pooled, const int64_t* positions, int32_t* sel, float* scratch,
                   int64_t T, int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks,
                   int64_t max_visible_blocks, cudaStream_t stream);

// The same for one query (T = 1) as one kernel with grid-wide barriers, launched cooperatively
// on every block the device holds at once (indexer_grid_cuda.cu): each block scores a contiguous
// run of the visible blocks and keeps their keys, the radix passes meet at barriers, and the
// selection is SelectKernel's, id for id. scratch: IndexerSelectGridScratchInts() ints, 16-byte
// aligned. Needs IndexerSelectGridFits: heads ≤ 8, di ≤ 256, max_visible_blocks small enough
// for a block's keys in shared memory, a device that launches cooperatively.
int64_t IndexerSelectGridScratchInts();
bool IndexerSelectGridFits(int64_t heads, int64_t di, int64_t max_visible_blocks);
void IndexerSelectGrid(const __half* iq, const __half* pooled, const int64_t* positions, int32_t* sel, int* scratch,
                       int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks, int64_t max_visible_blocks,
                       cudaStream_t stream);

struct SelectedAttentionDims {
  int64_t q_heads, kv_heads, head_dim, ratio, max_blocks;
};
// Splits of the attended tokens for T queries, and the F32 scratch they need.
int64_t AttentionSplits(int64_t T, const SelectedAttentionDims& d);
int64_t AttentionScratchFloats(int64_t T, const SelectedAttentionDims& d);
// Merges the splits' partial results in part [T·q_heads, splits, head_dim + 2] (each split's
// maximum, sum, then its unnormalized output) into o [T, q_heads·head_dim], times sigmoid(gate)
// where a gate [T, q_heads·head_dim] is given (as SigmoidMul rounds it); SelectedAttention runs
// it after its split kernel (attention_bench times it alone).
void AttentionMerge(const float* part, __half* o, int64_t T, int64_t q_heads, int64_t head_dim, int64_t splits,
                    cudaStream_t stream, const __half* gate = nullptr);
// The split kernel with one block per (query, query head, split), for the shapes the grouped
// kernels do not take (more than 16 query heads per KV head); partial results as DecodeAttention
// writes them. attention_bench times it beside DecodeAttention.
void QueryHeadAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                        const int64_t* positions, __half* o, float* part, int64_t T, int64_t splits,
                        const SelectedAttentionDims& d, cudaStream_t stream);
// head_dim 32, 64, 128 or 256. Decode (T ≤ 16) runs DecodeAttention (attention_decode_cuda.h)
// and the merge; prefill the grouped kernel (attention_prefill_cuda.h). With a gate [T, q_heads·
// head_dim], o is multiplied by sigmoid(gate) as SigmoidMul does it: in the merge where there is
// one, else by SigmoidMul.
void SelectedAttention(const __half* q, const __half* kcache, const __half* vcache, const int32_t* sel,
                       const int64_t* positions, __half* o, float* scratch, int64_t T,
                       const SelectedAttentionDims& d, cudaStream_t stream, const __half* gate = nullptr);

}  // namespace q38::cuda
