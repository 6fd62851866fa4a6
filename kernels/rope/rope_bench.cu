// Lab bench of attention's per-head norm and rotation on one GPU (kernels/testing/bench_timing.h):
// for one token at the full-size per-rank shapes of TP1, TP2 and TP4 (q 24/12/6 heads and k 2/1/1
// of 256, the indexer's q 4 of 128; 64 rotary dims; the key cache row written at position 8,191),
// the composition the model ran before (RmsNorm of q, k and the indexer's q, Rope of each, WriteRows
// of k: seven kernels) against cuda::NormRope (three); µs per attention layer in a CUDA graph of 12
// layers (a decode step's), eagerly in brackets. The fused result is checked bitwise against the
// composition's; the exit status is 1 if it differs.
// Usage: rope_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::FillHalfKernel;
using bench::Timing;

constexpr int64_t kHeadDim = 256, kIndexerHeads = 4, kIndexerDim = 128, kRotary = 64, kSlots = 8192;
constexpr double kTheta = 1e7;
constexpr float kEps = 1e-6f;

// One token's q, k and indexer q (refilled from x0 before every call), the norms and the key cache.
struct Heads {
  int64_t hq, hkv, n;
  DeviceArray<__half> x0, x, wq, wk, wi, cache;
  DeviceArray<int64_t> position{1};
  Heads(int64_t hq_, int64_t hkv_, cudaStream_t s)
      : hq(hq_), hkv(hkv_), n((hq_ + hkv_) * kHeadDim + kIndexerHeads * kIndexerDim), x0(n), x(n), wq(kHeadDim),
        wk(kHeadDim), wi(kIndexerDim), cache(kSlots * hkv_ * kHeadDim) {
    FillHalfKernel<<<64, 256, 0, s>>>(x0.p, n, 1, 4.0f);
    FillHalfKernel<<<4, 256, 0, s>>>(wq.p, kHeadDim, 2, 0.4f);
    FillHalfKernel<<<4, 256, 0, s>>>(wk.p, kHeadDim, 3, 0.4f);
    FillHalfKernel<<<4, 256, 0, s>>>(wi.p, kIndexerDim, 4, 0.4f);
    Q38_CUDA_LAUNCHED();
    const int64_t last = kSlots - 1;
    Q38_CUDA_CHECK(cudaMemcpyAsync(position.p, &last, sizeof last, cudaMemcpyHostToDevice, s));
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  __half* q() const { return x.p; }
  __half* k() const { return x.p + hq * kHeadDim; }
  __half* iq() const { return x.p + (hq + hkv) * kHeadDim; }
  void Reset(cudaStream_t s) { Q38_CUDA_CHECK(cudaMemcpyAsync(x.p, x0.p, n * sizeof(__half), cudaMemcpyDeviceToDevice, s)); }

  void Composed(cudaStream_t s) {
    cuda::RmsNorm(q(), wq.p, q(), hq, kHeadDim, kHeadDim, kHeadDim, kEps, true, s);
    cuda::RmsNorm(k(), wk.p, k(), hkv, kHeadDim, kHeadDim, kHeadDim, kEps, true, s);
    cuda::Rope(q(), position.p, 1, hq, kHeadDim, kRotary, kTheta, s);
    cuda::Rope(k(), position.p, 1, hkv, kHeadDim, kRotary, kTheta, s);
    cuda::WriteRows(k(), cache.p, position.p, 1, hkv * kHeadDim * sizeof(__half), s);
    cuda::RmsNorm(iq(), wi.p, iq(), kIndexerHeads, kIndexerDim, kIndexerDim, kIndexerDim, kEps, true, s);
    cuda::Rope(iq(), position.p, 1, kIndexerHeads, kIndexerDim, kRotary, kTheta, s);
  }
  void Fused(cudaStream_t s) {
    cuda::NormRope(q(), wq.p, position.p, 1, hq, kHeadDim, kRotary, kTheta, kEps, nullptr, s);
    cuda::NormRope(k(), wk.p, position.p, 1, hkv, kHeadDim, kRotary, kTheta, kEps, cache.p, s);
    cuda::NormRope(iq(), wi.p, position.p, 1, kIndexerHeads, kIndexerDim, kRotary, kTheta, kEps, nullptr, s);
  }
  // x and the written cache row, as bits.
  std::vector<uint16_t> Result() const {
    const int64_t row = hkv * kHeadDim;
    std::vector<uint16_t> r(n + row);
    Q38_CUDA_CHECK(cudaMemcpy(r.data(), x.p, n * sizeof(__half), cudaMemcpyDeviceToHost));
    Q38_CUDA_CHECK(cudaMemcpy(r.data() + n, cache.p + (kSlots - 1) * row, row * sizeof(__half), cudaMemcpyDeviceToHost));
    return r;
  }
};

int Run(Bench& b) {
  int failures = 0;
  const cudaStream_t s = b.stream();
  const int iters = 12;  // the attention layers of one decode step
  std::printf("\n## Attention's per-head norm and rotation, one token\n\n"
              "µs per layer in a CUDA graph of %d layers (eager in brackets).\n\n"
              "| shape | composed: 7 kernels | NormRope: 3 kernels | composed / fused | fused = composed |\n"
              "|---|---|---|---|---|\n",
              iters);
  struct Shape {
    const char* name;
    int64_t hq, hkv;
  };
  for (const Shape& c : {Shape{"TP1", 24, 2}, Shape{"TP2", 12, 1}, Shape{"TP4", 6, 1}}) {
    Heads h(c.hq, c.hkv, s);
    h.Reset(s);
    h.Composed(s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint16_t> want = h.Result();
    Q38_CUDA_CHECK(cudaMemset(h.cache.p, 0, kSlots * c.hkv * kHeadDim * sizeof(__half)));
    h.Reset(s);
    h.Fused(s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const bool same = h.Result() == want;
    failures += same ? 0 : 1;
    // Timed on x as it stands: normalizing normalized rows costs the same.
    const bench::Launch composed = [&](int, cudaStream_t st) { h.Composed(st); };
    const bench::Launch fused = [&](int, cudaStream_t st) { h.Fused(st); };
    const Timing tc = b.Graph(iters, composed), tf = b.Graph(iters, fused);
    const Timing ec = b.Eager(iters, composed), ef = b.Eager(iters, fused);
    std::printf("| %s decode | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %s |\n", c.name, tc.median_us, ec.median_us,
                tf.median_us, ef.median_us, tc.median_us / tf.median_us, same ? "bitwise" : "MISMATCH");
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("rope_bench", "fused matches composed", q38::Run); }
