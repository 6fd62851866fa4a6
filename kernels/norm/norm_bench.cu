// Lab bench of the zero-centred RMSNorm (cuda::RmsNorm, a block per group) on one GPU
// (kernels/testing/bench_timing.h), for one token and 8,192, at the model's calls of it:
//  - the hyper-connection norm and PLE's norm_query: the FP32 streams X [T, W = 10,240] in groups
//    of H = 2,560, weight [W] (the composition route of HcPre, at prefill and for the final mixer);
//  - PLE's norm_key and norm_conv: FP16 [T, W] in groups of H, weight [W];
//  - q_norm per head at TP1, TP2 and TP4: FP16 [T, Hq/TP · 256], weight [256] (the composition
//    NormRope replaces, where the fused kernel does not take the shape).
// HC and PLE are replicated, so those shapes are every TP size's. Each shape twice: 16-byte
// aligned (8 values a load) and one element off (the kernel of one value a load, the route for
// unaligned operands). The gated norm is timed in its layer by gdn_bench.
// µs per call in a CUDA graph of 100 calls at one token, 5 at 8,192 (eager in brackets), out of
// place; the bytes a call moves (x, w, y), GB/s and the share of the stream read. Every output is
// checked against cpu::RmsNorm on the same inputs, within 1e-3·|ref| + 1e-5 (the block sums the
// squares in another order, and y is FP16); the exit status is 1 if one is not.
// Usage: norm_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/testing/bench_checks.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::Timing;
using bench::ToHost;

constexpr float kEps = 1e-6f;

void FillInput(__half* p, int64_t n, cudaStream_t s) { bench::FillHalfKernel<<<1024, 256, 0, s>>>(p, n, 1, 4.0f); }
void FillInput(float* p, int64_t n, cudaStream_t s) { bench::FillFloatKernel<<<1024, 256, 0, s>>>(p, n, 1, 4.0f); }

// One call's operands, x and y `offset` elements past 16-byte alignment.
template <typename TX>
struct Norm {
  int64_t T, n, group, w_len, offset;
  DeviceArray<TX> x;
  DeviceArray<__half> w, y;
  Norm(int64_t T_, int64_t n_, int64_t group_, int64_t w_len_, int64_t offset_, cudaStream_t s)
      : T(T_), n(n_), group(group_), w_len(w_len_), offset(offset_), x(T * n + offset), w(w_len), y(T * n + offset) {
    FillInput(X(), T * n, s);
    bench::FillHalfKernel<<<64, 256, 0, s>>>(w.p, w_len, 2, 0.2f);  // zero-centred weights are near 0
    Q38_CUDA_LAUNCHED();
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  TX* X() const { return x.p + offset; }
  __half* Y() const { return y.p + offset; }
  void Launch(cudaStream_t s) const { cuda::RmsNorm(X(), w.p, Y(), T, n, group, w_len, kEps, true, s); }
  double Bytes() const { return (sizeof(TX) + 2.0) * T * n + 2.0 * w_len; }
};

// The largest gap from the CPU reference of one call, in units of the allowed one.
template <typename TX>
double GapToCpu(const Norm<TX>& m, cudaStream_t s) {
  const int64_t size = m.T * m.n;
  Q38_CUDA_CHECK(cudaMemsetAsync(m.Y(), 0xff, size * sizeof(__half), s));  // NaN, so an unwritten value fails
  m.Launch(s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> x = ToHost(m.X(), size), w = ToHost(m.w.p, m.w_len), got = ToHost(m.Y(), size);
  std::vector<float> ref(size);
  cpu::RmsNorm(x.data(), w.data(), ref.data(), m.T, m.n, m.group, m.w_len, kEps, true);
  return bench::GapOfAllowed(got, ref, 1e-3, 1e-5);
}

struct Shape {
  const char* call;
  const char* tp;
  bool fp32;  // x is the FP32 residual streams
  int64_t n, group, w_len;
};

template <typename TX>
int Case(Bench& b, const Shape& c, int64_t T, int64_t offset, double stream_gbs) {
  const Norm<TX> m(T, c.n, c.group, c.w_len, offset, b.stream());
  const double gap = GapToCpu(m, b.stream());
  const int iters = T == 1 ? 100 : 5;
  const bench::Launch launch = [&](int, cudaStream_t st) { m.Launch(st); };
  const Timing g = b.Graph(iters, launch), e = b.Eager(iters, launch);
  std::printf("| %s | %s | %ld | %ld | %d | %s | %s: gap %.2f of allowed |\n", c.call, c.tp, c.n, T,
              offset == 0 ? 8 : 1, bench::RateCells(g, e, m.Bytes(), stream_gbs).c_str(), gap <= 1 ? "ok" : "MISMATCH",
              gap);
  std::fflush(stdout);
  return gap <= 1 ? 0 : 1;
}

int Run(Bench& b) {
  const double stream_gbs = b.StreamReadGBs();
  std::printf("\nceilings: stream read %.0f GB/s\n\n## Zero-centred RMSNorm\n\n"
              "µs per call in a CUDA graph of 100 calls at one token, 5 at 8,192 (eager in brackets); MB a call "
              "reads and writes; GB/s and its share of the stream read. Values a load: 8 where x, w and y are "
              "16-byte aligned, 1 one element off.\n\n"
              "| call | TP | row | T | values a load | µs | MB | GB/s | share of stream read | against the CPU "
              "reference |\n|---|---|---|---|---|---|---|---|---|---|\n",
              stream_gbs);
  constexpr int64_t kW = 10240, kH = 2560, kHeadDim = 256;
  const Shape shapes[] = {
      {"hc_norm, PLE norm_query (FP32 X, groups of H)", "all", true, kW, kH, kW},
      {"PLE norm_key, norm_conv (FP16, groups of H)", "all", false, kW, kH, kW},
      {"q_norm per head", "1", false, 24 * kHeadDim, kHeadDim, kHeadDim},
      {"q_norm per head", "2", false, 12 * kHeadDim, kHeadDim, kHeadDim},
      {"q_norm per head", "4", false, 6 * kHeadDim, kHeadDim, kHeadDim},
  };
  int failures = 0;
  for (const Shape& c : shapes) {
    for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
      for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
        failures += c.fp32 ? Case<float>(b, c, T, offset, stream_gbs) : Case<__half>(b, c, T, offset, stream_gbs);
      }
    }
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("norm_bench", "RmsNorm matches the CPU reference", q38::Run); }
