// Lab bench of greedy decoding's token choice on one GPU (kernels/testing/bench_timing.h): per rank's
// lm_head output at full size (V = 248,320 over TP 1, 2 and 4), the old way (the logits to the
// host, 2 bytes a value, converted to FP32 and scanned for the greedy id there) against
// cuda::ArgMax (two kernels) and its 8-byte copy. Host-side paths are timed end to end (median of
// 200 steps, each ending in a synchronize); the kernels also inside a CUDA graph. Checks that both
// pick the same id; the exit status is 1 if not. Then cuda::TopLogits (a logprobs request's step)
// at k = 1, 5 and 20: µs per call and its top id against ArgMax's.
// Usage: logits_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/logits/logits_cuda.h"
#include "kernels/testing/bench_timing.h"

namespace q38 {
namespace {

__global__ void FillLogitsKernel(__half* p, int64_t n, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
    p[i] = __float2half(((h >> 8) * (1.0f / 16777216.0f) - 0.5f) * 30.0f);
  }
}

double MedianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimeHost(F&& step, int reps = 200) {
  std::vector<double> us;
  for (int r = 0; r < reps + 10; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double d = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 10) us.push_back(d);
  }
  return MedianUs(us);
}

// One rank's lm_head output at TP `tp` on the device (FillLogitsKernel), its greedy id found on the
// host, and output and scratch buffers large enough for ArgMax and TopLogits.
struct RankLogits {
  int64_t V;
  __half* x = nullptr;
  float *out = nullptr, *scratch = nullptr;
  int32_t host_id = 0;

  RankLogits(int tp, cudaStream_t s) : V(248320 / tp) {
    Q38_CUDA_CHECK(cudaMalloc(&x, V * sizeof(__half)));
    Q38_CUDA_CHECK(cudaMalloc(&out, (2 * cuda::kMaxTopLogits + 2) * sizeof(float)));
    Q38_CUDA_CHECK(cudaMalloc(&scratch, cuda::kArgMaxBlocks * (2 * cuda::kMaxTopLogits + 2) * sizeof(float)));
    FillLogitsKernel<<<256, 256, 0, s>>>(x, V, 7 + tp);
    Q38_CUDA_LAUNCHED();
    std::vector<__half> staged(V);
    Q38_CUDA_CHECK(cudaMemcpyAsync(staged.data(), x, V * sizeof(__half), cudaMemcpyDeviceToHost, s));
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    for (int64_t i = 1; i < V; ++i)
      if (__half2float(staged[i]) > __half2float(staged[host_id])) host_id = static_cast<int32_t>(i);
  }
  ~RankLogits() {
    cudaFree(x);
    cudaFree(out);
    cudaFree(scratch);
  }
};

int Run(bench::Bench& b) {
  int failures = 0;
  const cudaStream_t s = b.stream();
  std::printf("\n## Greedy token of one rank's logits\n\n");
  std::printf("| V on the rank | TP | logits to host + host scan µs | ArgMax + 8-byte copy µs | ArgMax kernels in a graph µs | "
              "ArgMax eager µs | same id |\n|---|---|---|---|---|---|---|\n");
  for (const int tp : {1, 2, 4}) {
    const RankLogits r(tp, s);
    const int64_t V = r.V;
    std::vector<__half> staged(V);
    std::vector<float> logits(V);
    int32_t scanned = -1, device_id = -1;
    // What Engine::Run did: CopyToHost (pageable, then FP16 → FP32), then the greedy scan.
    const double old_us = TimeHost([&] {
      Q38_CUDA_CHECK(cudaMemcpyAsync(staged.data(), r.x, V * sizeof(__half), cudaMemcpyDeviceToHost, s));
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      for (int64_t i = 0; i < V; ++i) logits[i] = __half2float(staged[i]);
      float top = -INFINITY;
      for (int64_t i = 0; i < V; ++i)
        if (logits[i] > top) top = logits[i], scanned = static_cast<int32_t>(i);
    });
    const double new_us = TimeHost([&] {
      cuda::ArgMax(r.x, V, r.out, r.scratch, s);
      float pair[2];
      Q38_CUDA_CHECK(cudaMemcpyAsync(pair, r.out, sizeof(pair), cudaMemcpyDeviceToHost, s));
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      device_id = static_cast<int32_t>(pair[1]);
    });
    const bench::Launch launch = [&](int, cudaStream_t st) { cuda::ArgMax(r.x, V, r.out, r.scratch, st); };
    const bench::Timing graph = b.Graph(50, launch), eager = b.Eager(50, launch);
    const bool same = scanned == device_id && scanned == r.host_id;
    if (!same) ++failures;
    std::printf("| %ld | %d | %.1f | %.1f | %.2f | %.2f | %s |\n", V, tp, old_us, new_us, graph.median_us, eager.median_us,
                same ? "yes" : "NO");
    std::fflush(stdout);
  }
  std::printf("\n## Log probabilities of one rank's logits (TopLogits)\n\n| V on the rank | TP | k | µs in a graph | "
              "top id is ArgMax's |\n|---|---|---|---|---|\n");
  for (const int tp : {1, 2, 4}) {
    const RankLogits r(tp, s);
    for (const int k : {1, 5, 20}) {
      const bench::Launch launch = [&](int, cudaStream_t st) { cuda::TopLogits(r.x, r.V, k, r.out, r.scratch, st); };
      const bench::Timing graph = b.Graph(50, launch);
      float top[2 * cuda::kMaxTopLogits + 2];
      Q38_CUDA_CHECK(cudaMemcpy(top, r.out, (2 * k + 2) * sizeof(float), cudaMemcpyDeviceToHost));
      const bool same = static_cast<int32_t>(top[k]) == r.host_id;
      if (!same) ++failures;
      std::printf("| %ld | %d | %d | %.2f | %s |\n", r.V, tp, k, graph.median_us, same ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("logits_bench", "ArgMax and TopLogits pick the host's id", q38::Run); }
