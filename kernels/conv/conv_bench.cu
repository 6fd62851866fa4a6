// Lab bench of the causal conv (cuda::CausalConv) on one GPU (kernels/testing/bench_timing.h), for
// one token and 8,192, at the model's two convs:
//  - PLE's: C = W = 10,240 channels, 4 taps at dilation N = 3 (a history of 9 rows); the block is
//    replicated, so every TP size runs it whole. It takes the per-channel kernel (CausalConvKernel);
//  - GDN's at TP1, TP2 and TP4: C = 10,240 / TP, 4 taps at dilation 1. Aligned, it takes the
//    4-tap kernel (CausalConv4Kernel); the same call on pointers one element off takes the
//    per-channel kernel, the route for unaligned operands and the kernel the 4-tap one replaced.
// µs per call in a CUDA graph of 36 calls (a decode step's GDN layers) at one token, each on its
// own weights and history (cold, as in a step), 5 at 8,192 (eager in brackets); the bytes a call
// moves (x, w, the history read and rewritten, y), GB/s and the share of the stream read.
// y and the new history are checked against cpu::CausalConv on the same FP16 inputs (history
// bitwise, y within 1e-3·|ref| + 1e-5: the reference sums in double), and the two GDN routes
// against each other bitwise; the exit status is 1 if one fails.
// Usage: conv_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/testing/bench_checks.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::FillHalfKernel;
using bench::Timing;
using bench::ToHost;

constexpr int64_t kTaps = 4;
constexpr int kDecodeIters = 36, kPrefillIters = 5;

// One conv's operands: `copies` of the weights and the history (one a launch at one token), x and
// y; `offset` elements past 16-byte alignment.
struct Conv {
  int64_t T, C, dilation, hist, copies, offset;
  DeviceArray<__half> x, w, state, state0, y;
  Conv(int64_t T_, int64_t C_, int64_t dilation_, int64_t offset_, cudaStream_t s)
      : T(T_), C(C_), dilation(dilation_), hist((kTaps - 1) * dilation_), copies(T_ == 1 ? kDecodeIters : 1),
        offset(offset_), x(T * C + offset), w(copies * C * kTaps), state(copies * hist * C + offset),
        state0(hist * C), y(T * C + offset) {
    FillHalfKernel<<<1024, 256, 0, s>>>(X(), T * C, 1, 4.0f);  // the same values at any offset
    FillHalfKernel<<<1024, 256, 0, s>>>(w.p, copies * C * kTaps, 2, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(state0.p, hist * C, 3, 4.0f);
    Q38_CUDA_LAUNCHED();
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  __half* X() const { return x.p + offset; }
  __half* Y() const { return y.p + offset; }
  __half* W(int i) const { return w.p + (i % copies) * C * kTaps; }
  __half* State(int i) const { return state.p + offset + (i % copies) * hist * C; }
  void Launch(int i, cudaStream_t s) { cuda::CausalConv(X(), W(i), State(i), Y(), T, C, kTaps, dilation, s); }
  // y and the new history of one call on copy 0 from the initial history, as floats.
  struct Result {
    std::vector<float> y, history;
    bool operator==(const Result& o) const { return y == o.y && history == o.history; }
  };
  Result Once(cudaStream_t s) {
    Q38_CUDA_CHECK(cudaMemcpyAsync(State(0), state0.p, hist * C * sizeof(__half), cudaMemcpyDeviceToDevice, s));
    Q38_CUDA_CHECK(cudaMemsetAsync(Y(), 0xff, T * C * sizeof(__half), s));  // NaN, so an unwritten value fails
    Launch(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    return {ToHost(Y(), T * C), ToHost(State(0), hist * C)};
  }
  double Bytes() const { return 2.0 * (2 * T * C + C * kTaps + 2 * hist * C); }
};

// The CPU reference on the same inputs: largest gap of y in units of the allowed one, and whether
// the history is the same.
struct Gap {
  double y = 0;
  bool history = false;
  bool ok() const { return y <= 1 && history; }
};

Gap AgainstCpu(const Conv& c, const Conv::Result& r) {
  const std::vector<float> x = ToHost(c.X(), c.T * c.C), w = ToHost(c.W(0), c.C * kTaps);
  std::vector<float> state = ToHost(c.state0.p, c.hist * c.C), ref(c.T * c.C);
  cpu::CausalConv(x.data(), w.data(), state.data(), ref.data(), c.T, c.C, kTaps, c.dilation);
  return {bench::GapOfAllowed(r.y, ref, 1e-3, 1e-5), r.history == state};
}

void PrintRow(const char* shape, const char* kernel, int64_t T, const Timing& graph, const Timing& eager,
              double bytes, double stream_gbs, const char* check) {
  std::printf("| %s | %s | %ld | %s | %s |\n", shape, kernel, T,
              bench::RateCells(graph, eager, bytes, stream_gbs).c_str(), check);
  std::fflush(stdout);
}

// Checks one route of one shape against the CPU (and, given `same_as`, against another route's
// bits), times it, prints its row; returns its result and adds to `failures`.
Conv::Result TimeAndCheck(Bench& b, const char* shape, const char* kernel, Conv& c, double stream_gbs,
                          int& failures, const Conv::Result* same_as = nullptr) {
  const Conv::Result r = c.Once(b.stream());
  const Gap g = AgainstCpu(c, r);
  const bool same = same_as == nullptr || r == *same_as;
  failures += (g.ok() ? 0 : 1) + (same ? 0 : 1);
  const int iters = c.T == 1 ? kDecodeIters : kPrefillIters;
  const bench::Launch launch = [&](int i, cudaStream_t st) { c.Launch(i, st); };
  const Timing tg = b.Graph(iters, launch), te = b.Eager(iters, launch);
  char check[160];
  std::snprintf(check, sizeof check, "%s: y gap %.2f of allowed, history %s%s", g.ok() && same ? "ok" : "MISMATCH",
                g.y, g.history ? "bitwise" : "DIFFERS",
                same_as == nullptr ? "" : same ? "; the 4-tap kernel's bits" : "; NOT the 4-tap kernel's bits");
  PrintRow(shape, kernel, c.T, tg, te, c.Bytes(), stream_gbs, check);
  return r;
}

int Run(Bench& b) {
  const cudaStream_t s = b.stream();
  const double stream_gbs = b.StreamReadGBs();
  std::printf("\nceilings: stream read %.0f GB/s\n\n## Causal conv\n\n"
              "µs per call in a CUDA graph of %d calls at one token (each on its own weights and history, cold), "
              "%d at 8,192 (eager in brackets); MB a call reads and writes; GB/s and its share of the stream read.\n\n"
              "| conv | kernel | T | µs | MB | GB/s | share of stream read | against the CPU reference |\n"
              "|---|---|---|---|---|---|---|---|\n",
              stream_gbs, kDecodeIters, kPrefillIters);
  int failures = 0;
  for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
    Conv ple(T, 10240, 3, 0, s);
    TimeAndCheck(b, "PLE, dilation 3 (every TP)", "per channel", ple, stream_gbs, failures);
  }
  for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
    for (const int tp : {1, 2, 4}) {
      char shape[64];
      std::snprintf(shape, sizeof shape, "GDN TP%d, C = %d", tp, 10240 / tp);
      Conv four(T, 10240 / tp, 1, 0, s), unaligned(T, 10240 / tp, 1, 1, s);
      const Conv::Result r4 = TimeAndCheck(b, shape, "4-tap", four, stream_gbs, failures);
      TimeAndCheck(b, shape, "per channel (unaligned)", unaligned, stream_gbs, failures, &r4);
    }
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("conv_bench", "the conv matches the CPU reference", q38::Run); }
