// Partial NeoX RoPE on the GPU, in place on FP16, as kernels/rope/rope.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

void Rope(__half* x, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          double theta, cudaStream_t stream);

// Per head of x [T, heads, head_dim] in place: the zero-centred RMSNorm with w [head_dim] (as
// RmsNorm rounds it), then the rotation, in one kernel (kernels/backend.h, NormRope); with a cache
// [positions, heads, head_dim], the rows are also written at their positions.
void NormRope(__half* x, const __half* w, const int64_t* positions, int64_t T, int64_t heads, int64_t head_dim,
              int64_t rotary_dim, double theta, float eps, __half* cache, cudaStream_t stream);

// Several tensors' NormRope and rows copied into caches in one kernel (Backend::
// PrepareAttentionInputs): block per (token, head) row of each tensor in turn, then block per
// token of each copy (src [T, width] to cache row positions[t], as WriteRows). The same bits as
// one NormRope per tensor and WriteRows per copy. Unused entries: heads 0, src null.
struct NormRopeTensor {
  __half* x = nullptr;          // [T, heads, head_dim], in place
  const __half* w = nullptr;    // [head_dim]
  __half* cache = nullptr;      // [positions, heads, head_dim] or null
  int64_t heads = 0, head_dim = 0;
};
struct RowCopy {
  const __half* src = nullptr;
  __half* cache = nullptr;
  int64_t width = 0;  // halves a row
};
struct NormRopeBatch {
  NormRopeTensor tensors[3];
  RowCopy copies[2];
};
// Whether one launch rounds every tensor as its own would (their rows allow the same load step).
bool NormRopeBatchFits(const NormRopeBatch& batch);
void NormRope(const NormRopeBatch& batch, const int64_t* positions, int64_t T, int64_t rotary_dim, double theta,
              float eps, cudaStream_t stream);

}  // namespace q38::cuda
