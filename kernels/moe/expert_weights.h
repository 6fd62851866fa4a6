// The routed experts of one layer as a backend holds them (Backend::RoutedExperts takes them).
#pragma once

#include <cstdint>

#include "kernels/buffer.h"

namespace q38 {

// Routed experts of one layer in ModelOpt NVFP4, fused gate|up (2I rows) and down (H rows).
struct Nvfp4ExpertWeights {
  Buffer gate_up_codes, gate_up_scales, down_codes, down_scales;  // U8
  Buffer gate_global, up_global, down_global;                     // F32 [E]
};
// Routed experts of one layer as dense weights (the official BF16 release).
struct DenseExpertWeights {
  Buffer gate_up;  // [E, 2I, H]
  Buffer down;     // [E, H, I]
};
struct ExpertWeights {
  bool nvfp4 = true;
  Nvfp4ExpertWeights q;
  DenseExpertWeights dense;
  int64_t intermediate = 0;  // I on this rank
};

}  // namespace q38
