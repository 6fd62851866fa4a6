// Timing helpers for the kernels' lab benches (kernels/*/*_bench.cu): CUDA-event timing of a
// batch of launches after a warmup, medians over repeats, the same batch as one CUDA graph (as the
// model replays decode), an L2 flush between batches, and the two ceilings a kernel is judged
// against on the GPU at hand: the stream-read bandwidth and the WMMA FP16 tensor-core rate.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace q38::bench {

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;  // per launch
};

// One launch; `i` counts launches within a batch, so a bench can rotate among copies of its
// inputs (launch i reads copy i % copies) and keep large operands out of the L2.
using Launch = std::function<void(int i, cudaStream_t stream)>;

class Bench;

// The main() of a bench without flags: exits 0 saying so where no GPU is visible, prints the
// device, runs `run` (which returns how many of its checks failed) and ends with `ok` or a
// mismatch line; 1 when a check failed.
int BenchMain(const char* name, const char* ok, const std::function<int(Bench&)>& run);

class Bench {
 public:
  explicit Bench(int device = 0);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  cudaStream_t stream() const { return stream_; }
  // "NVIDIA H200, 132 SMs, 60 MiB L2, driver 13.0" and the like.
  std::string DeviceLine() const;
  size_t l2_bytes() const { return l2_bytes_; }
  int sms() const { return sms_; }

  // `warmup` batches, then `repeats` batches of `iters` launches each between two events, the
  // L2 flushed before each batch (outside the events). Microseconds per launch.
  Timing Eager(int iters, const Launch& launch, int repeats = 7, int warmup = 2);
  // The same batch captured once as a CUDA graph and replayed: launch gaps as the model's decode
  // graph sees them.
  Timing Graph(int iters, const Launch& launch, int repeats = 7, int warmup = 2);

  // Writes a buffer twice the L2's size, evicting whatever the L2 held.
  void FlushL2();

  // Peak read bandwidth in GB/s (1e9 bytes): a kernel streaming a 1 GiB buffer with 16-byte
  // loads, the best of a few launch shapes and of loads through L1 or not (L1::no_allocate),
  // median of repeats.
  double StreamReadGBs();
  // Peak FP16 tensor-core rate through WMMA 16×16×16 with FP32 accumulators, in TFLOP/s: every
  // warp of a full grid multiplies register-resident fragments.
  double WmmaTflops();

 private:
  Timing Run(int iters, const Launch& launch, int repeats, int warmup, bool graph);

  int device_ = 0, sms_ = 0;
  size_t l2_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
};

}  // namespace q38::bench
