#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "worker/comm/nccl.h"
#include "worker/rank_device.h"

namespace q38 {

absl::StatusOr<RankDevice> OpenCudaRank(const RankDeviceOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(o.gpu));
  RankDevice d;
  d.comm = MakeSoloCommunicator();
  if (o.world > 1) {
    ASSIGN_OR_RETURN(d.comm, ConnectNccl({.rank = o.rank, .size = o.world, .store_dir = o.rendezvous,
                                          .prefix = o.group, .timeout_ms = o.timeout_ms, .stream = backend->stream()}));
  }
  const CudaDeviceInfo& info = backend->device();
  d.description = absl::StrCat("cuda:", info.ordinal, " ", info.name, " ", info.uuid);
  d.backend = std::move(backend);
  return d;
}

}  // namespace q38
