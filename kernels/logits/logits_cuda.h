// Logits reductions on the GPU (kernels/logits/logits.h).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/logits/logits.h"

namespace q38::cuda {

using cpu::kMaxTopLogits;

// Blocks of the first pass; scratch holds 2 · kArgMaxBlocks floats.
constexpr int kArgMaxBlocks = 128;

// out [2] = (the largest of x[0, valid), its index as a float), as cpu::ArgMax: NaN never wins,
// ties to the lowest index, (−inf, −1) with nothing above −inf. Two kernels: up to kArgMaxBlocks
// blocks each reduce a contiguous part to (value, index) in scratch, one block reduces those.
// The result is the unique (largest, lowest index), whatever the order of the reductions.
void ArgMax(const __half* x, int64_t valid, float* out, float* scratch, cudaStream_t stream);

// cpu::TopLogits on FP16 values, out [2k + 2] F32: the same values and indices as the reference;
// m equal and s summed in FP32 in another order. Two kernels, as ArgMax: up to kArgMaxBlocks
// blocks each summarize a contiguous part into scratch (kArgMaxBlocks · (2k + 2) floats), one
// block merges those.
void TopLogits(const __half* x, int64_t valid, int64_t k, float* out, float* scratch, cudaStream_t stream);

}  // namespace q38::cuda
