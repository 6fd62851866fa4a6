// The PLE block's ops on the GPU (docs/model.md §6.2–6.3), as kernels/ple/ple.h. PleLoad reads the
// staged table rows straight from pinned host memory.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace q38::cuda {

void PleLoad(const uint8_t* staged, DType dtype, float scale, __half* E, int64_t n, cudaStream_t stream);
void PleGate(const __half* kn, const __half* qn, const __half* v, __half* G, int64_t T, int64_t S, int64_t H,
             cudaStream_t stream);

}  // namespace q38::cuda
