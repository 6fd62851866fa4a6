// The CPU reference under the GPU's precision contract (docs/design.md §4): the CPU backend's FP32
// ops, with every activation the model allocates in act_dtype() rounded to FP16 after each op
// that writes it, and weights rounded to FP16 as the GPU converts them at load. FP32 tensors
// (GDN state, gates, the residual streams where the model keeps them in FP32) stay FP32.
//
// It answers what the contract itself costs against the FP32 reference, apart from any kernel:
// the GPU's agreement with the FP32 reference cannot be expected to beat this backend's.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace q38 {

// exact_ops: ops (Backend method names, e.g. "Linear") whose outputs are left in FP32, so that
// each op's share of the deviation can be measured; "Upload" leaves the weights exact.
std::unique_ptr<Backend> MakeFp16EmulationBackend(std::set<std::string> exact_ops = {});

// The names exact_ops accepts: every op that writes activations, and "Upload".
const std::vector<std::string>& Fp16EmulationOps();

}  // namespace q38
