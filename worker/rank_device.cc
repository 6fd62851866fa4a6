#include "worker/rank_device.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace q38 {

absl::StatusOr<RankDevice> OpenRankDevice(const RankDeviceOptions& o) {
  if (o.device == "cuda") return OpenCudaRank(o);
  if (o.device != "cpu") return absl::InvalidArgumentError(absl::StrCat("--device ", o.device, ": expected cpu or cuda"));
  RankDevice d;
  d.comm = MakeSoloCommunicator();  // one rank needs no transport
  if (o.world > 1 && o.cpu_comm == "shm") {
    ASSIGN_OR_RETURN(d.comm, ConnectSharedMemory({.rank = o.rank, .size = o.world, .store_dir = o.rendezvous,
                                                  .prefix = o.group, .timeout_ms = o.timeout_ms}));
  } else if (o.world > 1 && o.cpu_comm == "gloo") {
    ASSIGN_OR_RETURN(d.comm, ConnectGloo({.rank = o.rank, .size = o.world, .store_dir = o.rendezvous,
                                          .prefix = o.group, .timeout_ms = o.timeout_ms}));
  } else if (o.world > 1) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu_comm ", o.cpu_comm, ": expected shm or gloo"));
  }
  d.backend = MakeCpuBackend(o.cpu_math, o.cpu_threads > 0 ? o.cpu_threads : CpuThreadsPerRank(o.world));
  d.description = "cpu";
  d.manifest = CpuBackendManifest(*d.backend);
  return d;
}

}  // namespace q38
