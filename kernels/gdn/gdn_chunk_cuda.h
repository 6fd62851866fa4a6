// The chunked form of the GDN delta rule (prefill, 32 tokens or more), for gdn_cuda.cu: a prep
// kernel over every chunk at once, then the chunks in order with the state carried.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace q38::cuda {

constexpr int kGdnChunk = 32;  // tokens per chunk

// scratch: GdnDeltaRuleScratchFloats(T, Hv) floats. dk = kDk is 16, 32, 64 or 128.
template <int kDk>
void LaunchGdnChunked(const __half* qkv, const float* beta, const float* g, float* state, __half* o, float* scratch,
                      int64_t T, int64_t Hk, int64_t Hv, int64_t dv, cudaStream_t stream);

}  // namespace q38::cuda
