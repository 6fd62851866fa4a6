// Every tensor of a qwen4_exp checkpoint, once: its name, shape, the dtypes a checkpoint may store
// it in, how tensor parallelism splits it (docs/model.md §13) and how the checkpoint generator draws
// it. The weight loader reads by this schema, the generator (tools/checkpoint/) writes by it, and
// the synthetic weight source draws by it, so the three cannot disagree on a shape.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dtype.h"
#include "kernels/ple/ple_hash.h"

namespace q38 {

// How a rank's share is cut from the tensor.
enum class TpSplit {
  kReplicated,  // every rank holds all of it
  kRows,        // output rows (heads, channels, vocabulary) are divided among the ranks
  kColumns,     // input columns are divided: the rank's partial sums are all-reduced
  kExperts,     // NVFP4 or fused expert weights: gate/up rows and down columns per expert
};

// How the generator fills it (the loader ignores this).
enum class Draw {
  kUniform,       // center ± spread
  kIndexerQk,     // indexer query heads correlated with its key head (spread: the key's)
  kNvfp4Codes,    // random E2M1 code bytes, from the stream of the projection's prefix
  kNvfp4Scales,   // E4M3 block scales in [0.5, 2), continuing the codes' stream
  kConstant,      // every element = center
  kValues,        // int64 `values`
  kFp8Bytes,      // random E4M3 bytes without NaN
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<DType> dtypes;  // what a checkpoint may store it as; the generator writes the first
  TpSplit split = TpSplit::kReplicated;
  Draw draw = Draw::kUniform;
  float spread = 0.0f, center = 0.0f;
  std::vector<int64_t> values;  // kValues: what the config derives, and what a loader checks
  int64_t head_rows = 0;        // kIndexerQk: rows per head; the key head is the last
  bool scalar = false;          // one value, stored as [] or [1]
};

struct SchemaOptions {
  bool nvfp4_experts = true;  // false: the official release's fused BF16 experts
  bool fp8_ple = true;        // false: a BF16 n-gram table
  std::string prefix = "model.language_model.";  // of every tensor but lm_head
};

class TensorSchema {
 public:
  TensorSchema(const ModelConfig& config, const SchemaOptions& options);

  // In the generator's order, which fixes the bytes of every checkpoint it writes.
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // nullptr for a name the model does not have.
  const TensorSpec* Find(const std::string& name) const;

 private:
  friend class SchemaBuilder;
  std::vector<TensorSpec> tensors_;
  std::map<std::string, size_t> index_;
};

// The n-gram hash of the PLE modules (one module: layer index 0), from the config.
PleHashParams PleHashParamsOf(const ModelConfig& config);

}  // namespace q38
