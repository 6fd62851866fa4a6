// Kernels whose blocks meet at grid-wide barriers (cooperative_groups::this_grid().sync()). Their
// blocks must all be resident at once, which only a cooperative launch guarantees: it fails with
// cudaErrorCooperativeLaunchTooLarge instead of hanging when they would not be. A cooperative
// launch may be captured into a CUDA graph (it becomes a cooperative kernel node), so the decode
// graph replays such kernels like any other.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/cuda_check.h"

namespace q38::cuda {

// The grid kernels are tuned for two blocks an SM (`__launch_bounds__(256, 2)`); where fewer
// registers would let more in, more blocks would only add arrivals to every barrier.
constexpr int kGridBlocksPerSm = 2;

// How many blocks of `kernel` (with `threads` threads and `smem` bytes of dynamic shared memory)
// the current device holds at once, at most kGridBlocksPerSm an SM; 0 where it cannot launch
// cooperatively. Asked of the driver once per kernel, device and shape: an eager decode step asks
// it for every layer.
template <typename Kernel>
int CoResidentBlocks(Kernel kernel, int threads, size_t smem) {
  int device = 0;
  Q38_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t>, int> known;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem);
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int cooperative = 0, sms = 0, per_sm = 0;
  Q38_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (cooperative != 0) {
    Q38_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    Q38_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  }
  return known[key] = std::min(per_sm, kGridBlocksPerSm) * sms;
}

// The dynamic shared memory a block of `kernel` may take without opting in to more: 48 KB less
// the kernel's static shared memory.
template <typename Kernel>
size_t DynamicSharedLimit(Kernel kernel) {
  cudaFuncAttributes attributes{};
  Q38_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return (size_t{48} << 10) - attributes.sharedSizeBytes;
}

// Launches `kernel` cooperatively on `blocks` blocks (at most CoResidentBlocks of them).
template <typename... Params, typename... Args>
void LaunchCooperative(void (*kernel)(Params...), int blocks, int threads, size_t smem, cudaStream_t stream,
                       Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  Q38_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace q38::cuda
