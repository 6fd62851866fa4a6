#include "worker/rank_device.h"

namespace q38 {

absl::StatusOr<RankDevice> OpenCudaRank(const RankDeviceOptions&) {
  return absl::UnimplementedError("--device cuda: this build has no CUDA backend (configure with -DQ38_CUDA=ON)");
}

}  // namespace q38
