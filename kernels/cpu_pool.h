// Worker threads for the fast CPU backend's large products, where a rank has cores to itself
// (one rank on a host of several cores): Run(fn) calls fn(part) for every part in [0, threads()),
// part 0 on the calling thread and part w on worker w, and returns when all have returned.
// Workers spin briefly between runs (a decode step issues one every few tens of microseconds) and
// then sleep, so an idle rank costs no CPU. A part is computed by one thread the same way whatever
// the thread count, so results do not depend on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace q38 {

class CpuPool {
 public:
  explicit CpuPool(int threads);  // the caller plus threads - 1 workers
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // One Run at a time, from one thread.
  void Run(const std::function<void(int)>& fn);

 private:
  void Work(int part);

  std::vector<std::thread> workers_;
  const std::function<void(int)>* fn_ = nullptr;  // written before generation_ moves, read after
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};  // workers asleep on generation_
  std::atomic<bool> stop_{false};
};

}  // namespace q38
