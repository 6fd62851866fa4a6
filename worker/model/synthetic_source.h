// Weights of the schema's shapes drawn on the backend from a seed instead of read (docs/design.md
// §6: full-size speed work without a 130 GB checkpoint): NVFP4 experts, and an FP8 n-gram table of
// the full row count in host memory. Values are of the generator's magnitudes; the model is noise.
#pragma once

#include "kernels/backend.h"
#include "worker/model/weight_source.h"

namespace q38 {

class SyntheticSource : public WeightSource {
 public:
  SyntheticSource(Backend& backend, uint64_t seed) : backend_(backend), seed_(seed) {}

  absl::StatusOr<SchemaOptions> Layout() const override { return SchemaOptions{}; }
  absl::StatusOr<Buffer> Floats(const TensorSpec& t, const Ranges& rows, Range cols, bool f32) override;
  absl::StatusOr<Nvfp4ExpertWeights> Nvfp4Routed(const Nvfp4ExpertSpecs& experts, Range slice) override;
  absl::StatusOr<PleTable> NgramTable(const std::vector<const TensorSpec*>& shards, const TensorSpec& scale) override;
  // The values are the config's by construction.
  absl::Status CheckValues(const TensorSpec&) override { return absl::OkStatus(); }
  absl::Status CheckAllUsed() const override { return absl::OkStatus(); }

 private:
  // A tensor filled on the backend, its values depending on the seed and `name` only.
  Buffer Random(const std::string& name, DType dtype, std::vector<int64_t> shape, float spread);

  Backend& backend_;
  uint64_t seed_;
};

}  // namespace q38
