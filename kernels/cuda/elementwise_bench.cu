// Lab bench of the elementwise kernels of kernels/cuda/elementwise.h on one GPU
// (kernels/testing/bench_timing.h), at the model's calls of them (release shapes, TP1, TP2 and
// TP4 where the shape depends on it):
//  - FillFloat and FillHalf, a sequence's start: each GDN layer's recurrent state
//    [Hv/TP, 128, 128] FP32 and conv history [3, 10,240/TP], and PLE's history [9, 10,240];
//  - FillRandom, the synthetic weights at load: the GDN stacked projection [16,480/TP, 2,560]
//    FP16, a layer's routed gate/up NVFP4 codes [512, 1,280/TP, 1,280] and block scales
//    [512, 1,280/TP, 160] (bytes), A_log [48/TP] FP32;
//  - Add, PLE's X += G and X += C on the FP32 streams [T, 10,240], and its FP16 form (no caller in
//    the model) on the same shape;
//  - SigmoidMul, attention's output gate at prefill [T, 6,144/TP] (decode's merge applies it);
//  - WriteRows, the attention caches' rows where NormRope's batch does not take the shape: V
//    [Hkv/TP · 256] and the raw indexer key [128] into 16,384-row caches.
// One token and 8,192 where a call has tokens. µs per call in a CUDA graph of 100 calls where a
// call moves less than 1 MB, else 5 (eager in brackets); a sequence start's fills are a graph of 36
// calls, each on its own layer's buffer (PLE has one). The bytes a call moves, GB/s and the share of the stream
// read (a bound for kernels that only write). Checks: fills, FillRandom (on a sample of about 2²⁰
// elements, against common/splitmix64.h's draws), Add and WriteRows bitwise against the host;
// SigmoidMul within 1e-3·|ref| + 1e-6 (the kernel's exponential is __expf); the exit status is 1
// if one fails.
// Usage: elementwise_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "common/splitmix64.h"
#include "kernels/activation.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
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
using cuda::RandomKind;

constexpr int64_t kW = 10240, kGdnLayers = 36;

// Device bytes to the host. The bench's stream is non-blocking (cudaMemcpy does not wait for
// it), so callers synchronize it first.
template <typename T>
std::vector<T> Raw(const void* d, int64_t n) {
  std::vector<T> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

struct Table {
  Bench& b;
  double stream_gbs;
  int failures = 0;

  // Times `launch` (iters by the bytes a call moves unless given), prints its row and counts a
  // failed check.
  void Row(const char* kernel, const char* call, const char* tp, int64_t T, double bytes, const bench::Launch& launch,
           bool ok, const char* check, int iters = 0) {
    if (iters == 0) iters = bytes < 1e6 ? 100 : 5;
    const Timing g = b.Graph(iters, launch), e = b.Eager(iters, launch);
    char tokens[24] = "—";
    if (T > 0) std::snprintf(tokens, sizeof tokens, "%ld", T);
    std::printf("| %s | %s | %s | %s | %s | %s%s |\n", kernel, call, tp, tokens,
                bench::RateCells(g, e, bytes, stream_gbs).c_str(), ok ? "" : "MISMATCH: ", check);
    std::fflush(stdout);
    failures += ok ? 0 : 1;
  }
};

// A sequence start: `layers` buffers of n elements each set to 0, a launch a layer.
template <typename T>
void Fills(Table& t, const char* call, const char* tp, int64_t layers, int64_t n) {
  const cudaStream_t s = t.b.stream();
  DeviceArray<T> x(layers * n);
  Q38_CUDA_CHECK(cudaMemsetAsync(x.p, 0xff, layers * n * sizeof(T), s));
  const auto fill = [&](int i, cudaStream_t st) {
    if constexpr (sizeof(T) == 4) {
      cuda::FillFloat(x.p + (i % layers) * n, 0.0f, n, st);
    } else {
      cuda::FillHalf(x.p + (i % layers) * n, 0.0f, n, st);
    }
  };
  for (int i = 0; i < layers; ++i) fill(i, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<uint8_t> got = Raw<uint8_t>(x.p, layers * n * sizeof(T));
  const bool ok = std::all_of(got.begin(), got.end(), [](uint8_t v) { return v == 0; });
  t.Row(sizeof(T) == 4 ? "FillFloat" : "FillHalf", call, tp, 0, double(n) * sizeof(T), fill, ok, "zeros",
        static_cast<int>(kGdnLayers));
}

// FillRandom of n elements of `kind`, a sample of them against the host's draws.
void Random(Table& t, const char* call, const char* tp, RandomKind kind, int64_t n, float spread) {
  const cudaStream_t s = t.b.stream();
  const uint64_t seed = 0x5eed;
  const int64_t size = kind == RandomKind::kFloat ? 4 : kind == RandomKind::kHalf ? 2 : 1;
  DeviceArray<uint8_t> x(n * size);
  Q38_CUDA_CHECK(cudaMemsetAsync(x.p, 0xff, n * size, s));
  cuda::FillRandom(x.p, kind, seed, spread, n, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<uint8_t> got = Raw<uint8_t>(x.p, n * size);
  int64_t wrong = 0;
  const auto check_one = [&](int64_t i) {
    switch (kind) {
      case RandomKind::kHalf: {
        uint16_t v;
        std::memcpy(&v, &got[2 * i], 2);
        wrong += v != FloatToFp16(SyntheticUniform(seed, i, spread));
        break;
      }
      case RandomKind::kFloat: {
        float v;
        std::memcpy(&v, &got[4 * i], 4);
        wrong += v != SyntheticUniform(seed, i, spread);
        break;
      }
      case RandomKind::kByte: wrong += got[i] != SyntheticByte(seed, i); break;
      case RandomKind::kScaleByte: wrong += got[i] != SyntheticScaleByte(seed, i); break;
    }
  };
  for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n >> 20)) check_one(i);
  check_one(n - 1);
  char check[48] = "bitwise (sampled)";
  if (wrong != 0) std::snprintf(check, sizeof check, "%ld sampled values differ", wrong);
  static constexpr const char* kNames[] = {"FillRandom FP16", "FillRandom FP32", "FillRandom bytes",
                                           "FillRandom E4M3 scales"};
  t.Row(kNames[static_cast<int>(kind)], call, tp, 0, double(n) * size,
        [&](int, cudaStream_t st) { cuda::FillRandom(x.p, kind, seed, spread, n, st); }, wrong == 0, check);
}

// x += y on [T, kW], x FP32 (the streams) or FP16.
template <typename TX>
void Add(Table& t, const char* call, int64_t T) {
  const cudaStream_t s = t.b.stream();
  const int64_t n = T * kW;
  DeviceArray<TX> x(n);
  DeviceArray<__half> y(n);
  if constexpr (sizeof(TX) == 4) {
    bench::FillFloatKernel<<<1024, 256, 0, s>>>(x.p, n, 1, 8.0f);
  } else {
    FillHalfKernel<<<1024, 256, 0, s>>>(x.p, n, 1, 8.0f);
  }
  FillHalfKernel<<<1024, 256, 0, s>>>(y.p, n, 2, 2.0f);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> x0 = ToHost(x.p, n), hy = ToHost(y.p, n);
  cuda::Add(x.p, y.p, n, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  int64_t wrong = 0;
  if constexpr (sizeof(TX) == 4) {
    const std::vector<float> got = ToHost(x.p, n);
    for (int64_t i = 0; i < n; ++i) wrong += got[i] != x0[i] + hy[i];
  } else {
    const std::vector<uint16_t> got = Raw<uint16_t>(x.p, n);
    for (int64_t i = 0; i < n; ++i) wrong += got[i] != FloatToFp16(x0[i] + hy[i]);
  }
  char check[48] = "bitwise";
  if (wrong != 0) std::snprintf(check, sizeof check, "%ld values differ", wrong);
  // Timed on x as it stands: adding again costs the same.
  t.Row(sizeof(TX) == 4 ? "Add (FP32 x)" : "Add (FP16 x)", call, "all", T, n * (2.0 * sizeof(TX) + 2.0),
        [&](int, cudaStream_t st) { cuda::Add(x.p, y.p, n, st); }, wrong == 0, check);
}

void SigmoidMul(Table& t, const char* tp, int64_t T, int64_t width) {
  const cudaStream_t s = t.b.stream();
  const int64_t n = T * width;
  DeviceArray<__half> x(n), gate(n);
  FillHalfKernel<<<1024, 256, 0, s>>>(x.p, n, 3, 4.0f);
  FillHalfKernel<<<1024, 256, 0, s>>>(gate.p, n, 4, 8.0f);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> x0 = ToHost(x.p, n), g = ToHost(gate.p, n);
  cuda::SigmoidMul(x.p, gate.p, n, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = x0[i] * cpu::Sigmoid(g[i]);
  const double worst = bench::GapOfAllowed(ToHost(x.p, n), ref, 1e-3, 1e-6);
  char check[48];
  std::snprintf(check, sizeof check, "gap %.2f of allowed", worst);
  // Timed on x as it stands: gating again costs the same.
  t.Row("SigmoidMul", "attention output gate [T, Hq/TP · 256]", tp, T, n * 6.0,
        [&](int, cudaStream_t st) { cuda::SigmoidMul(x.p, gate.p, n, st); }, worst <= 1, check);
}

// T rows of `row` FP16 values into a cache of 16,384 rows at positions 8,192 − T to 8,191 (one
// token: the last of an 8,192-token context).
void WriteRows(Table& t, const char* call, const char* tp, int64_t T, int64_t row) {
  const cudaStream_t s = t.b.stream();
  constexpr int64_t kCacheRows = 16384, kEnd = 8192;
  DeviceArray<__half> src(T * row), cache(kCacheRows * row);
  DeviceArray<int64_t> positions(T);
  FillHalfKernel<<<1024, 256, 0, s>>>(src.p, T * row, 5, 4.0f);
  Q38_CUDA_LAUNCHED();
  std::vector<int64_t> pos(T);
  for (int64_t i = 0; i < T; ++i) pos[i] = kEnd - T + i;
  Q38_CUDA_CHECK(cudaMemcpyAsync(positions.p, pos.data(), T * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  Q38_CUDA_CHECK(cudaMemsetAsync(cache.p, 0xff, kCacheRows * row * sizeof(__half), s));
  const int64_t row_bytes = row * sizeof(__half);
  cuda::WriteRows(src.p, cache.p, positions.p, T, row_bytes, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const bool ok = Raw<uint16_t>(src.p, T * row) == Raw<uint16_t>(cache.p + (kEnd - T) * row, T * row);
  t.Row("WriteRows", call, tp, T, 2.0 * T * row_bytes + T * 8.0,
        [&](int, cudaStream_t st) { cuda::WriteRows(src.p, cache.p, positions.p, T, row_bytes, st); }, ok,
        "bitwise");
}

int Run(Bench& b) {
  Table t{b, b.StreamReadGBs()};
  std::printf("\nceilings: stream read %.0f GB/s\n\n## Elementwise kernels\n\n"
              "µs per call in a CUDA graph of 100 calls below 1 MB a call, else 5; a sequence start's fills 36, "
              "each on its own layer's buffer (eager in brackets). MB a call reads and writes; GB/s and its share "
              "of the stream read.\n\n"
              "| kernel | call | TP | T | µs | MB | GB/s | share of stream read | against the host |\n"
              "|---|---|---|---|---|---|---|---|---|\n",
              t.stream_gbs);
  const char* tps[] = {"1", "2", "4"};
  for (int k = 0; k < 3; ++k) {
    const int64_t tp = int64_t{1} << k;
    Fills<float>(t, "GDN recurrent state, a layer", tps[k], kGdnLayers, 48 / tp * 128 * 128);
    Fills<__half>(t, "GDN conv history, a layer", tps[k], kGdnLayers, 3 * kW / tp);
  }
  Fills<__half>(t, "PLE conv history", "all", 1, 9 * kW);
  for (int k = 0; k < 3; ++k) {
    const int64_t tp = int64_t{1} << k;
    Random(t, "GDN stacked projection", tps[k], RandomKind::kHalf, 16480 / tp * 2560, std::sqrt(3.0f / 2560));
    Random(t, "routed gate/up codes, a layer", tps[k], RandomKind::kByte, 512 * (1280 / tp) * 1280, 0);
    Random(t, "routed gate/up block scales, a layer", tps[k], RandomKind::kScaleByte, 512 * (1280 / tp) * 160, 0);
    Random(t, "A_log", tps[k], RandomKind::kFloat, 48 / tp, 0.1f);
  }
  for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
    Add<float>(t, "PLE: X += G, X += C", T);
    Add<__half>(t, "no caller; PLE's shape", T);
  }
  for (int k = 0; k < 3; ++k) SigmoidMul(t, tps[k], 8192, 6144 >> k);
  for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
    for (int k = 0; k < 3; ++k) WriteRows(t, "V rows [Hkv/TP · 256]", tps[k], T, (k == 0 ? 2 : 1) * 256);
    WriteRows(t, "raw indexer key [128]", "all", T, 128);
  }
  return t.failures;
}

}  // namespace
}  // namespace q38

int main() {
  return q38::bench::BenchMain("elementwise_bench", "every elementwise kernel matches the host", q38::Run);
}
