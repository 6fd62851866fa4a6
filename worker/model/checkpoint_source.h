// Weights read from a checkpoint in the Hugging Face layout (docs/model.md §2, §14): every tensor
// checked against its schema entry (present, shape, dtype), sliced on the host and uploaded; what
// the checkpoint holds beyond the schema is reported at the end.
#pragma once

#include <set>
#include <string>

#include "kernels/backend.h"
#include "worker/checkpoint/tensor_store.h"
#include "worker/model/weight_source.h"

namespace q38 {

class CheckpointSource : public WeightSource {
 public:
  CheckpointSource(const TensorStore& store, Backend& backend) : store_(store), backend_(backend) {}

  // The release's prefix or a text-only export's; NVFP4 per-expert tensors or the fused BF16 ones.
  absl::StatusOr<SchemaOptions> Layout() const override;
  absl::StatusOr<Buffer> Floats(const TensorSpec& t, const Ranges& rows, Range cols, bool f32) override;
  absl::StatusOr<Nvfp4ExpertWeights> Nvfp4Routed(const Nvfp4ExpertSpecs& experts, Range slice) override;
  absl::StatusOr<PleTable> NgramTable(const std::vector<const TensorSpec*>& shards, const TensorSpec& scale) override;
  absl::Status CheckValues(const TensorSpec& t) override;
  absl::Status CheckAllUsed() const override;

 private:
  // The stored tensor, if it has the spec's shape and one of its dtypes.
  absl::StatusOr<const TensorView*> Get(const TensorSpec& t);
  absl::StatusOr<float> Scalar(const TensorSpec& t);

  const TensorStore& store_;
  Backend& backend_;
  std::set<std::string> used_;
};

}  // namespace q38
