// Lab bench of a GDN layer's kernels on one GPU (kernels/testing/bench_timing.h), at the full-size
// per-rank shapes of TP1, TP2 and TP4 (dk = dv = 128, a 4-tap conv): the four kernels between the
// layer's projections (CausalConv, GdnGates, GdnDeltaRule, GatedRmsNorm), each alone and the four
// in sequence, and at one token the four as one kernel (GdnMixer; its y and state must be the four's
// bits, else the exit status is 1). One token: µs per layer inside a CUDA graph of 36 layers (a
// decode step's GDN layers), and eagerly, each launch on its own layer's states (copies spanning 256 MB, so the
// states arrive cold from memory as in the model). Then 8,192 tokens (the chunked delta rule),
// with digests of its output and state bits.
// The stream-read ceiling of the machine is printed beside the state's GB/s.
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
  std::unique_ptr<DeviceArray<float>> a_log, dt_bias, state, beta, g, scratch;
  std::unique_ptr<DeviceArray<int>> arrivals;
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
    scratch = std::make_unique<DeviceArray<float>>(std::max<int64_t>(cuda::GdnDeltaRuleScratchFloats(T, Hv), 1));
    arrivals = std::make_unique<DeviceArray<int>>(cuda::GdnMixerArrivals(Hk, Hv));
    Q38_CUDA_CHECK(cudaMemsetAsync(arrivals->p, 0, cuda::GdnMixerArrivals(Hk, Hv) * sizeof(int), s));
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
  void Delta(int i, cudaStream_t s) {
    cuda::GdnDeltaRule(xc->p, beta->p, g->p, State(i), o->p, scratch->p, T, Hk, Hv, kDk, kDv, s);
  }
  void Norm(cudaStream_t s) { cuda::GatedRmsNorm(o->p, z->p, norm->p, y->p, T, V, kDv, 1e-6f, false, s); }
  void All(int i, cudaStream_t s) {
    Conv(i, s);
    Gates(s);
    Delta(i, s);
    Norm(s);
  }
  // The four as one kernel (one token).
  void Mixer(int i, cudaStream_t s) {
    cuda::GdnMixer(qkv->p, z->p, b->p, a->p, {ConvW(i), a_log->p, dt_bias->p, norm->p, 1e-6f, false}, ConvState(i),
                   State(i), o->p, y->p, arrivals->p, Hk, Hv, kDk, kDv, s);
  }
  // y of the four and of the one from the same states of layer 0 (restored between): the same bits?
  bool MixerMatches(cudaStream_t s) {
    const int64_t hist = (kTaps - 1) * C, cells = Hv * kDk * kDv;
    DeviceArray<__half> hist0(hist);
    DeviceArray<float> state0(cells);
    Q38_CUDA_CHECK(cudaMemcpyAsync(hist0.p, ConvState(0), hist * 2, cudaMemcpyDeviceToDevice, s));
    Q38_CUDA_CHECK(cudaMemcpyAsync(state0.p, State(0), cells * 4, cudaMemcpyDeviceToDevice, s));
    All(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> four = bench::ToHost(y->p, V), state4 = bench::ToHost(State(0), cells);
    Q38_CUDA_CHECK(cudaMemcpyAsync(ConvState(0), hist0.p, hist * 2, cudaMemcpyDeviceToDevice, s));
    Q38_CUDA_CHECK(cudaMemcpyAsync(State(0), state0.p, cells * 4, cudaMemcpyDeviceToDevice, s));
    Mixer(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    return bench::ToHost(y->p, V) == four && bench::ToHost(State(0), cells) == state4;
  }
};


int Run(Bench& b) {
  const cudaStream_t s = b.stream();
  const double stream_gbs = b.StreamReadGBs();
  const int iters = 36;  // the GDN layers of one decode step
  int failures = 0;
  struct Shape {
    const char* name;
    int64_t Hk, Hv;
  };
  const Shape shapes[] = {{"TP1", 16, 48}, {"TP2", 8, 24}, {"TP4", 4, 12}};
  std::printf("\nceilings: stream read %.0f GB/s\n\n## GDN layer, one token\n\n"
              "µs per layer in a CUDA graph of %d layers (the four in sequence also eagerly, in brackets); each "
              "layer's states cold. GB/s: the FP32 state read and written by the delta rule.\n\n"
              "| shape | state MB | conv | gates | delta rule | gated norm | all four | delta rule GB/s | one kernel "
              "(GdnMixer) | its y and state against the four |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n",
              stream_gbs, iters);
  for (const Shape& c : shapes) {
    Layers l(c.Hk, c.Hv, 1, s);
    const double conv = b.Graph(iters, [&](int i, cudaStream_t st) { l.Conv(i, st); }).median_us;
    const double gates = b.Graph(iters, [&](int, cudaStream_t st) { l.Gates(st); }).median_us;
    const double delta = b.Graph(iters, [&](int i, cudaStream_t st) { l.Delta(i, st); }).median_us;
    const double norm = b.Graph(iters, [&](int, cudaStream_t st) { l.Norm(st); }).median_us;
    const bench::Launch all = [&](int i, cudaStream_t st) { l.All(i, st); };
    const Timing ta = b.Graph(iters, all), ea = b.Eager(iters, all);
    const bool same = l.MixerMatches(s);
    failures += same ? 0 : 1;
    const bench::Launch one = [&](int i, cudaStream_t st) { l.Mixer(i, st); };
    const Timing tm = b.Graph(iters, one), em = b.Eager(iters, one);
    std::printf("| %s decode | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f (%.2f) | %.0f | %.2f (%.2f) | %s |\n", c.name,
                l.StateBytes() / 1e6, conv, gates, delta, norm, ta.median_us, ea.median_us,
                2 * l.StateBytes() / (delta * 1e3), tm.median_us, em.median_us, same ? "bitwise" : "MISMATCH");
    std::fflush(stdout);
  }
  std::printf("\n## GDN layer, 8,192 tokens\n\nµs per layer, eager (the chunked delta rule); digests of the "
              "delta rule's output and state after the four from the filled inputs (two builds that print the same "
              "wrote the same bits).\n\n"
              "| shape | conv | gates | delta rule | gated norm | all four | tok/s of a layer | o digest | state "
              "digest |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& c : shapes) {
    const int64_t T = 8192;
    Layers l(c.Hk, c.Hv, T, s);
    l.All(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const uint64_t o_bits = bench::Digest(l.o->p, T * l.V), state_bits = bench::Digest(l.State(0), l.Hv * kDk * kDv);
    const auto time = [&](const bench::Launch& f) { return b.Eager(3, f, 5, 1).median_us; };
    const double conv = time([&](int i, cudaStream_t st) { l.Conv(i, st); });
    const double gates = time([&](int, cudaStream_t st) { l.Gates(st); });
    const double delta = time([&](int i, cudaStream_t st) { l.Delta(i, st); });
    const double norm = time([&](int, cudaStream_t st) { l.Norm(st); });
    const double all = time([&](int i, cudaStream_t st) { l.All(i, st); });
    std::printf("| %s prefill | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %016llx | %016llx |\n", c.name, conv, gates,
                delta, norm, all, T / (all * 1e-6), static_cast<unsigned long long>(o_bits),
                static_cast<unsigned long long>(state_bits));
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("gdn_bench", "timed", q38::Run); }
