#include "kernels/cpu_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace q38 {
namespace {

constexpr int kSpins = 20000;  // some tens of microseconds of polling before a worker sleeps

// The futex on the generation word itself, with a count of sleepers beside it, so that a Run
// while every worker still spins makes no system call.
void Sleep(std::atomic<uint32_t>& word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
void WakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

CpuPool::CpuPool(int threads) {
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { Work(w); });
}

CpuPool::~CpuPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  WakeAll(generation_);
  for (auto& t : workers_) t.join();
}

void CpuPool::Run(const std::function<void(int)>& fn) {
  if (workers_.empty()) return fn(0);
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeAll(generation_);
  fn(0);
  // Every worker has finished with fn_ once it counts itself done.
  while (done_.load(std::memory_order_acquire) < static_cast<int>(workers_.size())) __builtin_ia32_pause();
}

void CpuPool::Work(int part) {
  uint32_t seen = 0;  // the generation at construction: a Run may come before this thread starts
  while (true) {
    int spins = 0;
    uint32_t now;
    while ((now = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpins) {
        __builtin_ia32_pause();
        continue;
      }
      // Counted before the last look, so that Run either sees a sleeper or we see its generation.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen) Sleep(generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    seen = now;
    if (stop_.load()) return;
    (*fn_)(part);
    done_.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace q38
