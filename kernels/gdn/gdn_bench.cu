// Lab bench of a GDN layer's kernels on one GPU (kernels/testing/bench_timing.h), at the full-size
// per-rank shapes of TP1, TP2 and TP4 (dk = dv = 128, a 4-tap conv): the four kernels between the
// layer's projections (CausalConv, GdnGates, GdnDeltaRule, GatedRmsNorm), each alone and the four
// in sequence. One token: µs per layer inside a CUDA graph of 36 layers (a decode step's GDN
// layers), and eagerly, each launch on its own layer's states (copies spanning 256 MB, so the
// states arrive cold from memory as in the model). Then 8,192 tokens (the chunked delta rule).
// The stream-read ceiling of the machine is printed beside the state's GB/s. Between the two, the
// whole mixer of one token: its composition of 6 kernels against the one kernel (Mixers).
// Usage: gdn_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/conv/conv_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/gdn/gdn_cuda.h"
#include "kernels/linear/linear_cuda.h"
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
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  double StateBytes() const { return 4.0 * Hv * kDk * kDv; }
  __half* ConvW(int i) const { return conv_w->p + (i % copies) * C * kTaps; }
  __half* ConvState(int i) const { return conv_state->p + (i % copies) * (kTaps - 1) * C; }
  float* State(int i) const { return state->p + (i % copies) * Hv * kDk * kDv; }

  void Conv(int i, cudaStream_t s) { cuda::CausalConv(qkv->p, ConvW(i), ConvState(i), xc->p, T, C, kTaps, 1, s); }
  void Gates(cudaStream_t s) { cuda::GdnGates(b->p, a->p, a_log->p, dt_bias->p, beta->p, g->p, T, Hv, s); }
  void Delta(int i, cudaStream_t s) { cuda::GdnDeltaRule(xc->p, beta->p, g->p, State(i), o->p, T, Hk, Hv, kDk, kDv, s); }
  void Norm(cudaStream_t s) { cuda::GatedRmsNorm(o->p, z->p, norm->p, y->p, T, V, kDv, 1e-6f, false, s); }
  void All(int i, cudaStream_t s) {
    Conv(i, s);
    Gates(s);
    Delta(i, s);
    Norm(s);
  }
};


// A GDN layer's whole mixer of one token at TP1, 2 and 4: the CUDA backend's composition (the
// stacked GEMV, the four kernels above, the out GEMV: 6 kernels) against cuda::GdnBlockGrid (one),
// in a CUDA graph of 36 layers, the projections' weights and the states cold (copies spanning
// 256 MB). The outputs of one step from the same states must agree within 4× the NMSE of an FP16
// rounding; returns 1 for each that does not.
int Mixers(Bench& b, int iters) {
  const cudaStream_t s = b.stream();
  int failures = 0;
  constexpr int64_t kHidden = 2560;
  std::printf("\n## GDN mixer, one token\n\nµs per layer in a CUDA graph of %d layers (eager in brackets), GB/s "
              "of the projections' weights and the state read and written.\n\n"
              "| shape | composed: 6 kernels µs | grid: 1 kernel µs | composed / grid | grid GB/s | out NMSE grid vs "
              "composed |\n|---|---|---|---|---|---|\n",
              iters);
  struct Shape {
    const char* name;
    int64_t Hk, Hv;
  };
  for (const Shape shape : {Shape{"TP1", 16, 48}, Shape{"TP2", 8, 24}, Shape{"TP4", 4, 12}}) {
    const char* name = shape.name;
    const int64_t Hk = shape.Hk, Hv = shape.Hv;
    Layers l(Hk, Hv, 1, s);
    const int64_t rows = l.C + l.V + 2 * Hv, weights = rows * kHidden + kHidden * l.V;
    const int copies = static_cast<int>(std::max<int64_t>(2, 256'000'000 / (2 * weights)));
    DeviceArray<__half> h(kHidden), in(copies * rows * kHidden), out_w(copies * kHidden * l.V), proj(rows), out(kHidden),
        want(kHidden), conv0((kTaps - 1) * l.C);
    DeviceArray<float> state0(Hv * kDk * kDv);
    FillHalfKernel<<<16, 256, 0, s>>>(h.p, kHidden, 11, 4.0f);
    FillHalfKernel<<<4096, 256, 0, s>>>(in.p, copies * rows * kHidden, 12, 4.0f / std::sqrt(float{kHidden}));
    FillHalfKernel<<<4096, 256, 0, s>>>(out_w.p, copies * kHidden * l.V, 13, 4.0f / std::sqrt(static_cast<float>(l.V)));
    Q38_CUDA_LAUNCHED();
    const auto In = [&](int i) { return in.p + (i % copies) * rows * kHidden; };
    const auto Out = [&](int i) { return out_w.p + (i % copies) * kHidden * l.V; };
    const bench::Launch composed = [&](int i, cudaStream_t st) {
      cuda::Linear(h.p, In(i), proj.p, 1, kHidden, rows, st);
      cuda::CausalConv(proj.p, l.ConvW(i), l.ConvState(i), l.xc->p, 1, l.C, kTaps, 1, st);
      cuda::GdnGates(proj.p + l.C + l.V, proj.p + l.C + l.V + Hv, l.a_log->p, l.dt_bias->p, l.beta->p, l.g->p, 1, Hv, st);
      cuda::GdnDeltaRule(l.xc->p, l.beta->p, l.g->p, l.State(i), l.o->p, 1, Hk, Hv, kDk, kDv, st);
      cuda::GatedRmsNorm(l.o->p, proj.p + l.C, l.norm->p, l.y->p, 1, l.V, kDv, 1e-6f, true, st);
      cuda::Linear(l.y->p, Out(i), out.p, 1, l.V, kHidden, st);
    };
    const cuda::GdnBlockDims d{kHidden, l.C, kTaps, Hk, Hv, kDk, kDv, 1e-6f, true};
    DeviceArray<__half> o(l.V);
    const bench::Launch grid = [&](int i, cudaStream_t st) {
      cuda::GdnBlockGrid(d,
                         {h.p, In(i), l.ConvW(i), l.ConvState(i), l.a_log->p, l.dt_bias->p, l.State(i), l.norm->p,
                          Out(i), proj.p, o.p, out.p},
                         st);
    };
    // One step of each from the same states of copy 0.
    const auto save = [&](bool back) {
      const size_t cb = (kTaps - 1) * l.C * sizeof(__half), sb = Hv * kDk * kDv * sizeof(float);
      Q38_CUDA_CHECK(cudaMemcpyAsync(back ? l.ConvState(0) : conv0.p, back ? conv0.p : l.ConvState(0), cb,
                                     cudaMemcpyDeviceToDevice, s));
      Q38_CUDA_CHECK(cudaMemcpyAsync(back ? l.State(0) : state0.p, back ? state0.p : l.State(0), sb,
                                     cudaMemcpyDeviceToDevice, s));
    };
    save(false);
    const double nmse = bench::NmseOfSecond([&] { composed(0, s); },
                                            [&] {
                                              save(true);
                                              grid(0, s);
                                            },
                                            out.p, want.p, kHidden, s);
    const bool ok = nmse <= 4e-6;
    failures += ok ? 0 : 1;
    const double bytes = 2.0 * weights + 2 * l.StateBytes();
    const Timing tc = b.Graph(iters, composed), tg = b.Graph(iters, grid), ec = b.Eager(iters, composed),
                 eg = b.Eager(iters, grid);
    std::printf("| %s | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %.0f | %.2g%s |\n", name, tc.median_us, ec.median_us,
                tg.median_us, eg.median_us, tc.median_us / tg.median_us, bytes / (tg.median_us * 1e3), nmse,
                ok ? "" : " MISMATCH");
    std::fflush(stdout);
  }
  return failures;
}

int Run(Bench& b) {
  const cudaStream_t s = b.stream();
  int failures = 0;
  const double stream_gbs = b.StreamReadGBs();
  const int iters = 36;  // the GDN layers of one decode step
  struct Shape {
    const char* name;
    int64_t Hk, Hv;
  };
  const Shape shapes[] = {{"TP1", 16, 48}, {"TP2", 8, 24}, {"TP4", 4, 12}};
  std::printf("\nceilings: stream read %.0f GB/s\n\n## GDN layer, one token\n\n"
              "µs per layer in a CUDA graph of %d layers (the four in sequence also eagerly, in brackets); each "
              "layer's states cold. GB/s: the FP32 state read and written by the delta rule.\n\n"
              "| shape | state MB | conv | gates | delta rule | gated norm | all four | delta rule GB/s |\n"
              "|---|---|---|---|---|---|---|---|\n",
              stream_gbs, iters);
  for (const Shape& c : shapes) {
    Layers l(c.Hk, c.Hv, 1, s);
    const double conv = b.Graph(iters, [&](int i, cudaStream_t st) { l.Conv(i, st); }).median_us;
    const double gates = b.Graph(iters, [&](int, cudaStream_t st) { l.Gates(st); }).median_us;
    const double delta = b.Graph(iters, [&](int i, cudaStream_t st) { l.Delta(i, st); }).median_us;
    const double norm = b.Graph(iters, [&](int, cudaStream_t st) { l.Norm(st); }).median_us;
    const bench::Launch all = [&](int i, cudaStream_t st) { l.All(i, st); };
    const Timing ta = b.Graph(iters, all), ea = b.Eager(iters, all);
    std::printf("| %s decode | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f (%.2f) | %.0f |\n", c.name,
                l.StateBytes() / 1e6, conv, gates, delta, norm, ta.median_us, ea.median_us,
                2 * l.StateBytes() / (delta * 1e3));
    std::fflush(stdout);
  }
  failures += Mixers(b, iters);
  std::printf("\n## GDN layer, 8,192 tokens\n\nµs per layer, eager (the chunked delta rule).\n\n"
              "| shape | conv | gates | delta rule | gated norm | all four | tok/s of a layer |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const Shape& c : shapes) {
    const int64_t T = 8192;
    Layers l(c.Hk, c.Hv, T, s);
    const auto time = [&](const bench::Launch& f) { return b.Eager(3, f, 5, 1).median_us; };
    const double conv = time([&](int i, cudaStream_t st) { l.Conv(i, st); });
    const double gates = time([&](int, cudaStream_t st) { l.Gates(st); });
    const double delta = time([&](int i, cudaStream_t st) { l.Delta(i, st); });
    const double norm = time([&](int, cudaStream_t st) { l.Norm(st); });
    const double all = time([&](int i, cudaStream_t st) { l.All(i, st); });
    std::printf("| %s prefill | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", c.name, conv, gates, delta, norm, all,
                T / (all * 1e-6));
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("gdn_bench", "mixer matches composed", q38::Run); }
