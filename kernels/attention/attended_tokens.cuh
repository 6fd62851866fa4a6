// The tokens one query attends (docs/model.md §8.2): its selected blocks' tokens in ascending block
// order, then the tail of its own incomplete block. The query-head and prefill kernels walk it
// here; the decode kernel (attention_decode_cuda.cu) maps its split's tokens the same way but counts
// the selected blocks only where a split reaches past the last of them.
#pragma once

#include <cstdint>

namespace q38::cuda {

struct AttendedTokens {
  const int32_t* sel;  // the query's selected block ids, -1 after the last
  int64_t n_sel, ratio, tail, total;

  __device__ AttendedTokens(const int32_t* s, int64_t max_blocks, int64_t ratio_, int64_t position)
      : AttendedTokens(s, Counted{CountSelected(s, max_blocks)}, ratio_, position) {}
  // With the selected blocks already counted (a block counts them together: BlockCountSelected).
  struct Counted {
    int64_t n_sel;
  };
  __device__ AttendedTokens(const int32_t* s, Counted counted, int64_t ratio_, int64_t position)
      : sel(s), n_sel(counted.n_sel), ratio(ratio_), tail((position + 1) / ratio_ * ratio_),
        total(n_sel * ratio + (position + 1 - tail)) {}

  // One thread's walk: the ids before the first −1.
  __device__ static int64_t CountSelected(const int32_t* s, int64_t max_blocks) {
    int64_t n = 0;
    while (n < max_blocks && s[n] >= 0) ++n;
    return n;
  }
  // The same count by a whole block, one load a thread a round (the ids ascend, −1 after the
  // last, so the count of ids ≥ 0 is it); every thread of the block must call it.
  __device__ static int64_t BlockCountSelected(const int32_t* s, int64_t max_blocks) {
    int64_t n = 0;
    for (int64_t i0 = 0; i0 < max_blocks; i0 += blockDim.x) {
      const int64_t i = i0 + threadIdx.x;
      n += __syncthreads_count(i < max_blocks && s[i] >= 0);
    }
    return n;
  }

  // The i-th attended token's position, 0 ≤ i < total.
  __device__ __forceinline__ int64_t operator[](int64_t i) const {
    return i < n_sel * ratio ? static_cast<int64_t>(sel[i / ratio]) * ratio + i % ratio : tail + (i - n_sel * ratio);
  }
};

}  // namespace q38::cuda
