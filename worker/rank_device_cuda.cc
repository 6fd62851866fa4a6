#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "worker/comm/host_staged.h"
#include "worker/comm/cuda_group.h"
#include "worker/rank_device.h"

namespace q38 {

absl::StatusOr<RankDevice> OpenCudaRank(const RankDeviceOptions& o) {
  ASSIGN_OR_RETURN(const GridKernels grid, ParseGridKernels(o.cuda_grid_kernels));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(o.gpu, grid));
  RankDevice d;
  d.comm = MakeSoloCommunicator();
  if (o.world > 1) {
    // The ranks of one host meet in shared memory first: that is where they learn each other's
    // GPUs and take a route (worker/comm/cuda_group.h), and where host broadcasts go.
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host,
                     ConnectSharedMemory({.rank = o.rank, .size = o.world, .store_dir = o.rendezvous,
                                          .prefix = o.group + ".host", .timeout_ms = o.timeout_ms, .slot_bytes = 4096}));
    ASSIGN_OR_RETURN(d.comm, ConnectCudaGroup(std::move(host), {.store_dir = o.rendezvous, .prefix = o.group,
                                                                .timeout_ms = o.timeout_ms, .stream = backend->stream(),
                                                                .route = o.cuda_comm}));
  }
  const CudaDeviceInfo& info = backend->device();
  d.description = absl::StrCat("cuda:", info.ordinal, " ", info.name, " ", info.uuid);
  BackendManifest& m = d.manifest;
  m.device = {"cuda", info.name, info.uuid, info.pci_bus_id,
              absl::StrCat(info.compute_capability / 10, ".", info.compute_capability % 10),
              static_cast<int64_t>(info.total_memory)};
  m.dtypes = {"F16", "F16", "F32", "F16"};  // docs/design.md §4, GPU column
  // The routes docs/cuda.md describes; every op has one generic kernel or a row-count split.
  m.routes = {"linear:gemv(T<=8)|wmma_gemm", "experts:nvfp4_w4a16_pair_gemv", "attention:qsa_split_context",
              "gdn:recurrent_state_in_registers", "indexer:radix_topk", "ple:staged_host_rows",
              "decode_grid_kernels:" + GridKernelsName(backend->grid_kernels())};
  d.backend = std::move(backend);
  return d;
}

absl::StatusOr<std::unique_ptr<Communicator>> StageThroughHost(Backend& backend, std::unique_ptr<Communicator> host) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return absl::InvalidArgumentError("host-staged collectives need a CUDA backend");
  return MakeHostStagedCommunicator(std::move(host), cuda->stream());
}

}  // namespace q38
