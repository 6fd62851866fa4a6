// Lab bench of the PLE block's own kernels on one GPU (kernels/testing/bench_timing.h), at the
// release's shapes (D = H = 2,560, S = 4 streams, W = S·H = 10,240; the block is replicated, so
// TP1, TP2 and TP4 run the same shapes), for one token and 8,192:
//  - PleLoad of a step's staged n-gram rows (16 heads of 160 values a token) for each table dtype
//    (F8_E4M3 with its scale, BF16, F32), read from pinned, device-mapped host memory as the model
//    stages them: its ceiling is the host link, so the share of the stream read is a lower bound;
//  - PleGate (a block per token and stream) on Kn, Qn [T, W] and V [T, H].
// µs per call in a CUDA graph of a batch (eager in brackets), the bytes a call moves, GB/s and the
// share of the stream read measured here. PleLoad is checked bitwise against cpu::PleLoad rounded
// to FP16; PleGate within 2e-3·|V| + 1e-6 of cpu::PleGate (the block sums its dot product in
// another order); the exit status is 1 if one fails.
// Usage: ple_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/splitmix64.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/ple/ple.h"
#include "kernels/ple/ple_cuda.h"
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

constexpr int64_t kS = 4, kH = 2560, kW = kS * kH, kD = 2560;
constexpr float kFp8Scale = 1.0f / 64;  // an F8_E4M3 table's weight_scale; BF16 and F32 tables have none

// Staging memory as Model::AllocInputs gets it (cudaHostAllocMapped; the host pointer is the
// device's under unified addressing).
struct Pinned {
  uint8_t* p = nullptr;
  explicit Pinned(size_t bytes) { Q38_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped)); }
  ~Pinned() { cudaFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// n staged values of `dtype` of moderate magnitude. E4M3's NaN codes (0x7F, 0xFF) are moved one
// code down, so that the bitwise comparison compares numbers.
void FillStaged(DType dtype, int64_t n, uint8_t* staged) {
  for (int64_t i = 0; i < n; ++i) {
    const float f = SyntheticUniform(11, i, 4.0f);
    if (dtype == DType::kF8E4M3) {
      uint8_t b = SyntheticByte(11, i);
      staged[i] = (b & 0x7F) == 0x7F ? b ^ 1 : b;
    } else if (dtype == DType::kBF16) {
      const uint16_t v = FloatToBf16(f);
      std::memcpy(staged + 2 * i, &v, 2);
    } else {
      std::memcpy(staged + 4 * i, &f, 4);
    }
  }
}

std::vector<uint16_t> Bits(const __half* d, int64_t n) {
  std::vector<uint16_t> r(n);
  Q38_CUDA_CHECK(cudaMemcpy(r.data(), d, n * sizeof(__half), cudaMemcpyDeviceToHost));
  return r;
}

void PrintRow(const char* kernel, const char* what, int64_t T, const Timing& graph, const Timing& eager, double bytes,
              double stream_gbs, const char* check) {
  std::printf("| %s | %s | %ld | %s | %s |\n", kernel, what, T,
              bench::RateCells(graph, eager, bytes, stream_gbs).c_str(), check);
  std::fflush(stdout);
}

// A batch: enough calls to amortize a launch at one token, a few at 8,192.
int Iters(int64_t T) { return T == 1 ? 100 : 5; }

int Load(Bench& b, int64_t T, DType dtype, double stream_gbs) {
  const cudaStream_t s = b.stream();
  const int64_t n = T * kD;
  const size_t size = DTypeSize(dtype);
  const float scale = dtype == DType::kF8E4M3 ? kFp8Scale : 1.0f;
  Pinned staged(n * size);
  FillStaged(dtype, n, staged.p);
  DeviceArray<__half> E(n);
  Q38_CUDA_CHECK(cudaMemsetAsync(E.p, 0xff, n * sizeof(__half), s));  // NaN, so an unwritten value fails
  cuda::PleLoad(staged.p, dtype, scale, E.p, n, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ref(n);
  cpu::PleLoad(staged.p, dtype, scale, ref.data(), n);
  const std::vector<uint16_t> got = Bits(E.p, n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += got[i] != FloatToFp16(ref[i]);
  const bench::Launch launch = [&](int, cudaStream_t st) { cuda::PleLoad(staged.p, dtype, scale, E.p, n, st); };
  const Timing g = b.Graph(Iters(T), launch), e = b.Eager(Iters(T), launch);
  char check[64] = "bitwise";
  if (wrong != 0) std::snprintf(check, sizeof check, "MISMATCH: %ld values", wrong);
  PrintRow("PleLoad", std::string(DTypeName(dtype)).c_str(), T, g, e, n * (size + 2.0), stream_gbs, check);
  return wrong == 0 ? 0 : 1;
}

int Gate(Bench& b, int64_t T, double stream_gbs) {
  const cudaStream_t s = b.stream();
  DeviceArray<__half> kn(T * kW), qn(T * kW), v(T * kH), G(T * kW);
  // Kn and Qn as the norms leave them: of order one.
  FillHalfKernel<<<1024, 256, 0, s>>>(kn.p, T * kW, 1, 4.0f);
  FillHalfKernel<<<1024, 256, 0, s>>>(qn.p, T * kW, 2, 4.0f);
  FillHalfKernel<<<1024, 256, 0, s>>>(v.p, T * kH, 3, 2.0f);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaMemsetAsync(G.p, 0xff, T * kW * sizeof(__half), s));
  cuda::PleGate(kn.p, qn.p, v.p, G.p, T, kS, kH, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> hk = ToHost(kn.p, T * kW), hq = ToHost(qn.p, T * kW), hv = ToHost(v.p, T * kH);
  const std::vector<float> got = ToHost(G.p, T * kW);
  std::vector<float> ref(T * kW);
  cpu::PleGate(hk.data(), hq.data(), hv.data(), ref.data(), T, kS, kH);
  double worst = 0;  // the largest gap in units of the allowed one
  for (int64_t i = 0; i < T * kW; ++i) {
    const double allowed = 2e-3 * std::fabs(hv[i / kW * kH + i % kH]) + 1e-6;
    const double gap = std::fabs(static_cast<double>(got[i]) - ref[i]);
    worst = std::isfinite(gap) ? std::fmax(worst, gap / allowed) : INFINITY;
  }
  const bench::Launch launch = [&](int, cudaStream_t st) { cuda::PleGate(kn.p, qn.p, v.p, G.p, T, kS, kH, st); };
  const Timing g = b.Graph(Iters(T), launch), e = b.Eager(Iters(T), launch);
  char check[64];
  std::snprintf(check, sizeof check, "%s: largest gap %.2f of allowed", worst <= 1 ? "ok" : "MISMATCH", worst);
  PrintRow("PleGate", "Kn, Qn [T, W], V [T, H]", T, g, e, 2.0 * T * (3 * kW + kH), stream_gbs, check);
  return worst <= 1 ? 0 : 1;
}

int Run(Bench& b) {
  const double stream_gbs = b.StreamReadGBs();
  std::printf("\nceilings: stream read %.0f GB/s\n\n## PLE kernels (replicated: every TP size)\n\n"
              "µs per call in a CUDA graph of 100 calls at one token, 5 at 8,192 (eager in brackets); MB a call "
              "reads and writes; GB/s and its share of the stream read. PleLoad reads host memory.\n\n"
              "| kernel | input | T | µs | MB | GB/s | share of stream read | against the CPU reference |\n"
              "|---|---|---|---|---|---|---|---|\n",
              stream_gbs);
  int failures = 0;
  for (const int64_t T : {int64_t{1}, int64_t{8192}}) {
    for (const DType dtype : {DType::kF8E4M3, DType::kBF16, DType::kF32}) failures += Load(b, T, dtype, stream_gbs);
    failures += Gate(b, T, stream_gbs);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("ple_bench", "PleLoad and PleGate match the CPU reference", q38::Run); }
