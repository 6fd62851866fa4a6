#include "kernels/cuda/device_allocator.h"

#include <bit>

#include "kernels/cuda/cuda_check.h"

namespace q38::cuda {

size_t RoundBlock(size_t bytes) {
  if (bytes <= 4096) return (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  // Large blocks are weights and caches, allocated once: keep them tight.
  constexpr size_t kLarge = size_t{64} << 20, kPage = size_t{2} << 20;
  if (bytes > kLarge) return (bytes + kPage - 1) / kPage * kPage;
  // At most 1/8 wasted: round up to a multiple of an eighth of the enclosing power of two.
  const size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

DevicePool::~DevicePool() {
  for (void* p : owned_) cudaFree(p);
}

void* DevicePool::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  Q38_CUDA_CHECK(cudaMalloc(&p, bytes));
  std::lock_guard<std::mutex> lock(mu_);
  owned_.push_back(p);
  reserved_ += bytes;
  return p;
}

void DevicePool::Give(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(bytes, p);
}

std::shared_ptr<void> DeviceAllocator::Allocate(size_t bytes) {
  const size_t rounded = RoundBlock(bytes);
  std::shared_ptr<DevicePool> pool = current_;
  void* p = pool->Take(rounded);
  return std::shared_ptr<void>(p, [pool, rounded](void* q) { pool->Give(q, rounded); });
}

}  // namespace q38::cuda
