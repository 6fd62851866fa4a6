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
      : sel(s), n_sel(0), ratio(ratio_), tail((position + 1) / ratio_ * ratio_) {
    while (n_sel < max_blocks && sel[n_sel] >= 0) ++n_sel;
    total = n_sel * ratio + (position + 1 - tail);
  }

  // The i-th attended token's position, 0 ≤ i < total.
  __device__ __forceinline__ int64_t operator[](int64_t i) const {
    return i < n_sel * ratio ? static_cast<int64_t>(sel[i / ratio]) * ratio + i % ratio : tail + (i - n_sel * ratio);
  }
};

}  // namespace q38::cuda
