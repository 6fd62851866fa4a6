// Where one rank's weights come from: a checkpoint (checkpoint_source) or draws of the same shapes
// on the backend (synthetic_source). The loader (weights.cc) decides what each rank holds, by the
// tensor schema and the TP plan; a source only produces it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/buffer.h"
#include "kernels/moe/expert_weights.h"
#include "kernels/ple/ple.h"
#include "worker/model/tensor_schema.h"

namespace q38 {

using Range = std::pair<int64_t, int64_t>;  // begin, count
using Ranges = std::vector<Range>;

// The four tensors of one ModelOpt NVFP4 projection.
struct Nvfp4Projection {
  const TensorSpec *codes, *scales, *global, *input_scale;
};
// Every routed expert of one layer, expert by expert.
struct Nvfp4ExpertSpecs {
  std::vector<Nvfp4Projection> gate, up, down;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // The tensor prefix and expert format the schema must list.
  virtual absl::StatusOr<SchemaOptions> Layout() const = 0;
  // A floating-point tensor seen as [rows, row length], the row length its last dimension (1 for a
  // vector): the given row ranges concatenated (all rows when empty), columns `cols` of each
  // (all when cols.second < 0). On the backend in its weight format, or kept in FP32. The result
  // is [rows, cols], or [rows] for a vector.
  virtual absl::StatusOr<Buffer> Floats(const TensorSpec& t, const Ranges& rows, Range cols, bool f32) = 0;
  // The routed experts, gate and up rows [slice) of each, down columns [slice), stacked as
  // Nvfp4ExpertWeights holds them.
  virtual absl::StatusOr<Nvfp4ExpertWeights> Nvfp4Routed(const Nvfp4ExpertSpecs& experts, Range slice) = 0;
  // The PLE n-gram table from its shards (and its scale, read when the shards are FP8), which stay
  // in host memory.
  virtual absl::StatusOr<PleTable> NgramTable(const std::vector<const TensorSpec*>& shards, const TensorSpec& scale) = 0;
  // An integer buffer that must hold the values the config derives (the PLE hash).
  virtual absl::Status CheckValues(const TensorSpec& t) = 0;
  // After the last tensor: what a source holds beyond the schema.
  virtual absl::Status CheckAllUsed() const = 0;
};

}  // namespace q38
