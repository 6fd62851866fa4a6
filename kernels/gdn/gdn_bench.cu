// Lab bench of a GDN layer's mixer on one GPU (kernels/testing/bench_timing.h): at the full-size
// per-rank shapes of TP1, TP2 and TP4 (dk = dv = 128, a 4-tap conv), one token as the composition of
// four kernels (CausalConv, GdnGates, GdnDeltaRule, GatedRmsNorm) and as the fused kernel
// (cuda::GdnMix); µs per layer inside a CUDA graph of 36 layers (a decode step's GDN layers) and
// eagerly, each launch on its own layer's states (copies spanning 256 MB, so the states arrive
// cold from memory as in the model). Then the composition at prefill shapes (8,192 tokens, the
// chunked kernel). The fused output and states are checked against the composition's (bitwise);
// the exit status is 1 if any differs.
// Usage: gdn_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/gdn/gdn_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::FillHalfKernel;
using bench::Timing;


constexpr int64_t kDk = 128, kDv = 128, kTaps = 4;

// One rank's GDN layers: `copies` of the conv weights and both states, and one token's inputs.
struct Layers {
  int64_t Hk, Hv, C, V, T, copies;
  std::unique_ptr<DeviceArray<__half>> qkv, z, b, a, conv_w, conv_state, xc, o, y, norm;
  std::unique_ptr<DeviceArray<float>> a_log, dt_bias, state, beta, g;
  DeviceArray<int> counters{cuda::kGdnMixMaxKeyHeads};
  Layers(int64_t Hk_, int64_t Hv_, int64_t T_, cudaStream_t s) : Hk(Hk_), Hv(Hv_), T(T_) {
    C = 2 * Hk * kDk + Hv * kDv;
    V = Hv * kDv;
    copies = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(256e6 / StateBytes())));
    qkv = std::make_unique<DeviceArray<__half>>(T * C);
    z = std::make_unique<DeviceArray<__half>>(T * V);
    b = std::make_unique<DeviceArray<__half>>(T * Hv);
    a = std::make_unique<DeviceArray<__half>>(T * Hv);
    xc = std::make_unique<DeviceArray<__half>>(T * C);
    o = std::make_unique<DeviceArray<__half>>(T * V);
    y = std::make_unique<DeviceArray<__half>>(T * V);
    norm = std::make_unique<DeviceArray<__half>>(kDv);
    conv_w = std::make_unique<DeviceArray<__half>>(copies * C * kTaps);
    conv_state = std::make_unique<DeviceArray<__half>>(copies * (kTaps - 1) * C);
    a_log = std::make_unique<DeviceArray<float>>(Hv);
    dt_bias = std::make_unique<DeviceArray<float>>(Hv);
    state = std::make_unique<DeviceArray<float>>(copies * Hv * kDk * kDv);
    beta = std::make_unique<DeviceArray<float>>(T * Hv);
    g = std::make_unique<DeviceArray<float>>(T * Hv);
    FillHalfKernel<<<1024, 256, 0, s>>>(qkv->p, T * C, 1, 4.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(z->p, T * V, 2, 4.0f);
    FillHalfKernel<<<64, 256, 0, s>>>(b->p, T * Hv, 3, 4.0f);
    FillHalfKernel<<<64, 256, 0, s>>>(a->p, T * Hv, 4, 4.0f);
    FillHalfKernel<<<4, 256, 0, s>>>(norm->p, kDv, 5, 0.4f);
    FillHalfKernel<<<1024, 256, 0, s>>>(conv_w->p, copies * C * kTaps, 6, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(conv_state->p, copies * (kTaps - 1) * C, 7, 4.0f);
    bench::FillFloatKernel<<<4, 256, 0, s>>>(a_log->p, Hv, 8, 1.0f);
    bench::FillFloatKernel<<<4, 256, 0, s>>>(dt_bias->p, Hv, 9, 1.0f);
    bench::FillFloatKernel<<<1024, 256, 0, s>>>(state->p, copies * Hv * kDk * kDv, 10, 0.2f);
    Q38_CUDA_LAUNCHED();
    Q38_CUDA_CHECK(cudaMemsetAsync(counters.p, 0, cuda::kGdnMixMaxKeyHeads * sizeof(int), s));
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  double StateBytes() const { return 4.0 * Hv * kDk * kDv; }
  __half* ConvW(int i) const { return conv_w->p + (i % copies) * C * kTaps; }
  __half* ConvState(int i) const { return conv_state->p + (i % copies) * (kTaps - 1) * C; }
  float* State(int i) const { return state->p + (i % copies) * Hv * kDk * kDv; }

  void Composed(int i, cudaStream_t s) {
    cuda::CausalConv(qkv->p, ConvW(i), ConvState(i), xc->p, T, C, kTaps, 1, s);
    cuda::GdnGates(b->p, a->p, a_log->p, dt_bias->p, beta->p, g->p, T, Hv, s);
    cuda::GdnDeltaRule(xc->p, beta->p, g->p, State(i), o->p, T, Hk, Hv, kDk, kDv, s);
    cuda::GatedRmsNorm(o->p, z->p, norm->p, y->p, T, V, kDv, 1e-6f, false, s);
  }
  void Fused(int i, cudaStream_t s) {
    cuda::GdnMix(cuda::GdnMixArgs{qkv->p, z->p, b->p, a->p, ConvW(i), norm->p, a_log->p, dt_bias->p, ConvState(i),
                                  State(i), y->p, counters.p, Hk, Hv, kDk, kDv, kTaps, false, 1e-6f},
                 s);
  }
};

template <typename T>
std::vector<T> Read(const T* d, size_t n) {
  std::vector<T> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// After one composed call on copy 0 and one fused call on copy 1 from the same starting values,
// y, the state and the conv history agree bit for bit.
bool SameAsComposed(Layers& l, cudaStream_t s) {
  const size_t state = l.Hv * kDk * kDv, hist = (kTaps - 1) * l.C;
  Q38_CUDA_CHECK(cudaMemcpyAsync(l.State(1), l.State(0), state * sizeof(float), cudaMemcpyDeviceToDevice, s));
  Q38_CUDA_CHECK(cudaMemcpyAsync(l.ConvState(1), l.ConvState(0), hist * sizeof(__half), cudaMemcpyDeviceToDevice, s));
  Q38_CUDA_CHECK(cudaMemcpyAsync(l.ConvW(1), l.ConvW(0), l.C * kTaps * sizeof(__half), cudaMemcpyDeviceToDevice, s));
  l.Composed(0, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<__half> y0 = Read(l.y->p, l.V);
  l.Fused(1, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<__half> y1 = Read(l.y->p, l.V);
  const auto bits = [](const std::vector<__half>& v) {
    std::vector<uint16_t> u(v.size());
    std::memcpy(u.data(), v.data(), v.size() * sizeof(__half));
    return u;
  };
  return bits(y0) == bits(y1) && Read(l.State(0), state) == Read(l.State(1), state) &&
         bits(Read(l.ConvState(0), hist)) == bits(Read(l.ConvState(1), hist));
}

int Run(Bench& b) {
  int failures = 0;
  const cudaStream_t s = b.stream();
  const int iters = 36;  // the GDN layers of one decode step
  std::printf("\n## GDN mixer, one token (conv, gates, delta rule, gated norm)\n\n"
              "µs per layer in a CUDA graph of %d layers (eager in brackets); each layer's states cold. GB/s: the "
              "FP32 state read and written by the fused kernel.\n\n"
              "| shape | state MB | composed: 4 kernels µs | fused µs | composed / fused | fused GB/s | fused = composed "
              "|\n|---|---|---|---|---|---|---|\n",
              iters);
  struct Shape {
    const char* name;
    int64_t Hk, Hv;
  };
  const Shape shapes[] = {{"TP1", 16, 48}, {"TP2", 8, 24}, {"TP4", 4, 12}};
  for (const Shape& c : shapes) {
    Layers l(c.Hk, c.Hv, 1, s);
    const bool same = SameAsComposed(l, s);
    if (!same) {
      ++failures;
      std::printf("MISMATCH %s: the fused kernel differs from the composition\n", c.name);
    }
    const bench::Launch composed = [&](int i, cudaStream_t st) { l.Composed(i, st); };
    const bench::Launch fused = [&](int i, cudaStream_t st) { l.Fused(i, st); };
    const Timing tc = b.Graph(iters, composed), tf = b.Graph(iters, fused);
    const Timing ec = b.Eager(iters, composed), ef = b.Eager(iters, fused);
    std::printf("| %s decode | %.1f | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %.0f | %s |\n", c.name, l.StateBytes() / 1e6,
                tc.median_us, ec.median_us, tf.median_us, ef.median_us, tc.median_us / tf.median_us,
                2 * l.StateBytes() / (tf.median_us * 1e3), same ? "bitwise" : "NO");
    std::fflush(stdout);
  }
  std::printf("\n### Prefill (the composition; the chunked delta rule)\n\nµs per layer, eager, 8,192 tokens.\n\n"
              "| shape | conv | gates | delta rule | gated norm | all four | tok/s of a layer |\n|---|---|---|---|---|---|---|\n");
  for (const Shape& c : shapes) {
    const int64_t T = 8192;
    Layers l(c.Hk, c.Hv, T, s);
    const auto time = [&](const bench::Launch& f) { return b.Eager(3, f, 5, 1).median_us; };
    const double conv = time([&](int i, cudaStream_t st) {
      cuda::CausalConv(l.qkv->p, l.ConvW(i), l.ConvState(i), l.xc->p, T, l.C, kTaps, 1, st);
    });
    const double gates = time([&](int, cudaStream_t st) {
      cuda::GdnGates(l.b->p, l.a->p, l.a_log->p, l.dt_bias->p, l.beta->p, l.g->p, T, l.Hv, st);
    });
    const double delta = time([&](int i, cudaStream_t st) {
      cuda::GdnDeltaRule(l.xc->p, l.beta->p, l.g->p, l.State(i), l.o->p, T, l.Hk, l.Hv, kDk, kDv, st);
    });
    const double norm = time([&](int, cudaStream_t st) {
      cuda::GatedRmsNorm(l.o->p, l.z->p, l.norm->p, l.y->p, T, l.V, kDv, 1e-6f, false, st);
    });
    const double all = time([&](int i, cudaStream_t st) { l.Composed(i, st); });
    std::printf("| %s prefill | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", c.name, conv, gates, delta, norm, all,
                T / (all * 1e-6));
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("gdn_bench", "fused matches composed", q38::Run); }
