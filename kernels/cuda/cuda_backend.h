// The CUDA backend (docs/design.md §3–§5): FP16 activations and weights, FP32 GDN state, every op an
// SM70 kernel, all work queued on one stream of one GPU. NCCL collectives join that stream.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/device_allocator.h"

namespace q38 {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;          // "GPU-xxxxxxxx-…", as nvidia-smi prints it
  std::string pci_bus_id;
  int compute_capability = 0;  // 10·major + minor
  size_t total_memory = 0;
  int runtime_version = 0, driver_version = 0;
};

// The decode kernels with grid-wide barriers a backend may run (docs/cuda.md): the indexer's
// selection of one query at long context, where the device and its sharing allow. On by default;
// off to measure it against the kernels it replaces, or to keep cooperative launches off a system
// whose driver mishandles them.
struct GridKernels {
  bool indexer = true;
};
// "all" (or "indexer", its one member) or "none" (the --cuda_grid_kernels flag).
absl::StatusOr<GridKernels> ParseGridKernels(const std::string& spec);
std::string GridKernelsName(const GridKernels& g);  // "all" or "none"

class CudaBackend : public Backend {
 public:
  // Uses GPU `ordinal` (of the devices this process sees) from the calling thread on.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal, const GridKernels& grid = {});

  virtual cudaStream_t stream() const = 0;
  virtual const CudaDeviceInfo& device() const = 0;
  // Device memory held by this backend's allocator, in bytes.
  virtual size_t reserved_bytes() const = 0;
  virtual const GridKernels& grid_kernels() const = 0;
};

}  // namespace q38
