// Device memory for one GPU, cached so that the steady state never calls cudaMalloc: a freed
// block goes back to the free list of the pool it came from, keyed by its rounded size. All work
// runs on one stream, so a block freed while queued kernels still read it can be handed out again
// at once: the next user's work is queued behind them.
//
// A graph capture draws from a private pool that lives as long as the graph, so that the
// addresses baked into the graph are never handed to anyone else.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace q38::cuda {

class DevicePool {
 public:
  DevicePool() = default;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  ~DevicePool();

  void* Take(size_t bytes);  // bytes already rounded
  void Give(void* p, size_t bytes);
  size_t reserved() const { return reserved_; }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::vector<void*> owned_;
  size_t reserved_ = 0;
};

class DeviceAllocator {
 public:
  DeviceAllocator() : current_(std::make_shared<DevicePool>()), main_(current_) {}

  // Device memory of at least `bytes` from the current pool; released when the last copy of the
  // returned pointer goes.
  std::shared_ptr<void> Allocate(size_t bytes);

  // Routes allocations to `pool` until the returned guard is destroyed.
  class Scope {
   public:
    Scope(DeviceAllocator& a, std::shared_ptr<DevicePool> pool) : a_(a), saved_(a.current_) { a.current_ = std::move(pool); }
    ~Scope() { a_.current_ = saved_; }

   private:
    DeviceAllocator& a_;
    std::shared_ptr<DevicePool> saved_;
  };

  size_t reserved() const { return main_->reserved(); }

 private:
  std::shared_ptr<DevicePool> current_;
  std::shared_ptr<DevicePool> main_;
};

// Sizes are rounded so that a block can serve the next request of nearly the same size.
size_t RoundBlock(size_t bytes);

}  // namespace q38::cuda
