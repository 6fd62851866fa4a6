// Lab bench of the hyper-connection pre step on one GPU (kernels/testing/bench_util.h): at the
// full-size decode shapes (one token; S = 4, H = 2560, R = 320; a layer's module with inject rows
// and the final mixer's without), the composition of five kernels the model ran before (RmsNorm,
// down/inject GEMV, gates, up GEMV, combine) against the fused two (cuda::HcPreFused); µs per
// pre step inside a CUDA graph of a batch of steps (as the decode graph replays them) and eagerly,
// weights cold in the L2 (a batch rotates among copies spanning 256 MB), X one buffer. The
// residual update (one kernel, unchanged) is timed beside them. The fused output is checked
// against the composed one (NMSE of h, largest gap of g); the exit status is 1 if they disagree.
// Usage: hc_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/hc/hc_cuda.h"
#include "kernels/linear/linear_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/testing/bench_util.h"

namespace q38 {
namespace {

using bench::Bench;
using bench::Timing;

__device__ __forceinline__ float HashUnit(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) * 40503u ^ seed;
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12, h *= 0x297a2d39u, h ^= h >> 15;
  return (h >> 8) * (1.0f / 16777216.0f) - 0.5f;  // [-0.5, 0.5)
}
__global__ void FillHalfKernel(__half* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = __float2half(scale * HashUnit(i, seed));
}
__global__ void FillFloatKernel(float* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = scale * HashUnit(i, seed);
}

template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { Q38_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

std::vector<float> ToHost(const __half* d, size_t n) {
  std::vector<__half> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(__half), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __half2float(h[i]);
  return f;
}

// One module's operands: copies of its weights spanning 256 MB, X, scratch and outputs.
struct Module {
  int64_t S, H, R, rows, W;
  int copies;
  std::unique_ptr<DeviceArray<__half>> norm, down, up, xn, di, a, m, h, g, y, di2;
  std::unique_ptr<DeviceArray<float>> X, rstd;
  Module(int64_t S_, int64_t H_, int64_t R_, bool inject, cudaStream_t s) : S(S_), H(H_), R(R_) {
    W = S * H;
    rows = R + (inject ? S : 0);
    const double bytes = 2.0 * (rows * W + W * R);
    copies = static_cast<int>(std::max(2.0, std::ceil(256e6 / bytes)));
    norm = std::make_unique<DeviceArray<__half>>(W);
    down = std::make_unique<DeviceArray<__half>>(rows * W * copies);
    up = std::make_unique<DeviceArray<__half>>(W * R * copies);
    xn = std::make_unique<DeviceArray<__half>>(W);
    di = std::make_unique<DeviceArray<__half>>(rows);
    di2 = std::make_unique<DeviceArray<__half>>(rows);
    a = std::make_unique<DeviceArray<__half>>(R);
    m = std::make_unique<DeviceArray<__half>>(W);
    h = std::make_unique<DeviceArray<__half>>(H);
    g = std::make_unique<DeviceArray<__half>>(S);
    y = std::make_unique<DeviceArray<__half>>(H);
    X = std::make_unique<DeviceArray<float>>(W);
    rstd = std::make_unique<DeviceArray<float>>(S);
    FillHalfKernel<<<64, 256, 0, s>>>(norm->p, W, 1, 0.4f);
    FillHalfKernel<<<1024, 256, 0, s>>>(down->p, rows * W * copies, 2, 2.0f / std::sqrt(static_cast<float>(W)) * 3.4f);
    FillHalfKernel<<<1024, 256, 0, s>>>(up->p, W * R * copies, 3, 2.0f / std::sqrt(static_cast<float>(R)) * 3.4f);
    FillFloatKernel<<<64, 256, 0, s>>>(X->p, W, 4, 4.0f);
    FillHalfKernel<<<16, 256, 0, s>>>(y->p, H, 5, 1.0f);
    Q38_CUDA_LAUNCHED();
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const __half* Down(int i) const { return down->p + (i % copies) * rows * W; }
  const __half* Up(int i) const { return up->p + (i % copies) * W * R; }
  double WeightBytes() const { return 2.0 * (rows * W + W * R); }
  bool inject() const { return rows > R; }

  // The composition Model::HyperConnection ran before the fused op.
  void Composed(int i, cudaStream_t s) {
    cuda::RmsNorm(X->p, norm->p, xn->p, 1, W, H, W, 1e-6f, true, s);
    cuda::Linear(xn->p, Down(i), di->p, 1, W, rows, s);
    cuda::HcGates(di->p, a->p, inject() ? g->p : nullptr, 1, R, S, inject(), s);
    cuda::Linear(a->p, Up(i), m->p, 1, R, W, s);
    cuda::HcCombine(m->p, xn->p, h->p, 1, S, H, s);
  }
  void Fused(int i, cudaStream_t s) {
    cuda::HcPreFused(X->p, norm->p, W, Down(i), Up(i), h->p, inject() ? g->p : nullptr, di2->p, rstd->p, S, H, R,
                     inject(), 1e-6f, s);
  }
};

int Run(Bench& b) {
  int failures = 0;
  const cudaStream_t s = b.stream();
  std::printf("\n## Hyper-connection pre step, one token\n\n"
              "µs per pre step in a CUDA graph of a batch of steps (eager in brackets); weights cold in the L2.\n\n");
  std::printf("| module | weights MB | composed: 5 kernels µs | fused: 2 kernels µs | composed / fused | fused GB/s | "
              "h NMSE fused vs composed | g max rel. gap |\n|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    const char* name;
    int64_t S, H, R;
    bool inject;
  };
  for (const Shape& c : {Shape{"layer module (full size)", 4, 2560, 320, true},
                         Shape{"final mixer (full size)", 4, 2560, 320, false},
                         Shape{"layer module (small model)", 4, 256, 16, true}}) {
    Module m(c.S, c.H, c.R, c.inject, s);
    m.Composed(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> h0 = ToHost(m.h->p, c.H), g0 = ToHost(m.g->p, c.S);
    Q38_CUDA_CHECK(cudaMemsetAsync(m.h->p, 0xff, 2 * c.H, s));
    Q38_CUDA_CHECK(cudaMemsetAsync(m.g->p, 0xff, 2 * c.S, s));
    m.Fused(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> h1 = ToHost(m.h->p, c.H), g1 = ToHost(m.g->p, c.S);
    double err = 0, ref = 0, gap = 0;
    for (int64_t i = 0; i < c.H; ++i) {
      err += (static_cast<double>(h1[i]) - h0[i]) * (static_cast<double>(h1[i]) - h0[i]);
      ref += static_cast<double>(h0[i]) * h0[i];
    }
    if (c.inject)
      for (int64_t i = 0; i < c.S; ++i) gap = std::max(gap, std::fabs(static_cast<double>(g1[i]) - g0[i]) / std::fabs(g0[i]));
    const double nmse = std::isfinite(err) ? err / std::max(ref, 1e-30) : INFINITY;
    if (!(nmse <= 4e-6 && gap <= 2e-3)) {
      ++failures;
      std::printf("MISMATCH %s: h NMSE %.2g, g gap %.2g\n", c.name, nmse, gap);
    }
    const int iters = 97;  // the pre steps of one decode step
    const bench::Launch composed = [&](int i, cudaStream_t st) { m.Composed(i, st); };
    const bench::Launch fused = [&](int i, cudaStream_t st) { m.Fused(i, st); };
    const Timing tc = b.Graph(iters, composed), tf = b.Graph(iters, fused);
    const Timing ec = b.Eager(iters, composed), ef = b.Eager(iters, fused);
    std::printf("| %s | %.1f | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %.0f | %.2g | %.2g |\n", c.name, m.WeightBytes() / 1e6,
                tc.median_us, ec.median_us, tf.median_us, ef.median_us, tc.median_us / tf.median_us,
                m.WeightBytes() / (tf.median_us * 1e3), nmse, gap);
    if (c.inject && c.H == 2560) {
      const Timing tr = b.Graph(iters, [&](int, cudaStream_t st) { cuda::HcResidual(m.X->p, m.g->p, m.y->p, 1, c.S, c.H, st); });
      std::printf("| residual update (one kernel, unchanged) | | %.2f | %.2f | | | | |\n", tr.median_us, tr.median_us);
    }
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("hc_bench: no CUDA device visible\n");
    return 0;
  }
  q38::bench::Bench b;
  std::printf("# hc_bench on %s\n", b.DeviceLine().c_str());
  const int failures = q38::Run(b);
  std::printf("\n%s\n", failures == 0 ? "fused matches composed" : "MISMATCHES: see above");
  return failures == 0 ? 0 : 1;
}
