#include "worker/rank_device.h"

namespace q38 {

absl::StatusOr<RankDevice> OpenCudaRank(const RankDeviceOptions&) {
  return absl::UnimplementedError("--device cuda: this build has no CUDA backend (configure with -DQ38_CUDA=ON)");
}

absl::StatusOr<std::unique_ptr<Communicator>> StageThroughHost(Backend&, std::unique_ptr<Communicator>) {
  return absl::UnimplementedError("host-staged collectives: this build has no CUDA backend");
}

}  // namespace q38
