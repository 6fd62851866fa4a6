#include "kernels/testing/bench_timing.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_check.h"

namespace q38::bench {
namespace {

// Reads n 16-byte words, grid-stride, four loads in flight per thread; writes only if the sum
// hits a value random data never gives, so the loads are not optimized away.
template <bool kNoL1>
__device__ __forceinline__ uint4 Load16(const uint4* p) {
  if constexpr (kNoL1) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  } else {
    return __ldg(p);
  }
}

template <bool kNoL1>
__global__ void StreamReadKernel(const uint4* __restrict__ p, int64_t n, unsigned* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = Load16<kNoL1>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = Load16<kNoL1>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void FillKernel(uint4* p, int64_t n, unsigned seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    p[i] = make_uint4(h, h * 3u + 1u, h * 7u + 5u, h ^ 0x5bd1e995u);
  }
}

// `iters` rounds of four independent 16×16×16 products per warp on fragments in registers.
__global__ void WmmaKernel(int iters, float* sink) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[4];
  wmma::fill_fragment(a, __float2half(1e-3f * (threadIdx.x % 7)));
  wmma::fill_fragment(b, __float2half(1e-3f));
  // Distinct starting values, so that the compiler cannot merge the four chains into one.
#pragma unroll
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(c[j], 0.25f * j);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::mma_sync(c[j], a, b, c[j]);
  }
  // Every element: a 16×16 product is two hardware MMAs of 16×8, and the compiler drops the one
  // whose outputs nobody reads.
  float s = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    for (int e = 0; e < c[j].num_elements; ++e) s += c[j].x[e];
  if (s == 12345.0f) *sink = s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

Bench::Bench(int device) : device_(device) {
  Q38_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  Q38_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sms_ = prop.multiProcessorCount;
  l2_bytes_ = prop.l2CacheSize;
  Q38_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  Q38_CUDA_CHECK(cudaEventCreate(&start_));
  Q38_CUDA_CHECK(cudaEventCreate(&stop_));
  flush_bytes_ = std::max<size_t>(2 * l2_bytes_, size_t{64} << 20);
  Q38_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_));
}

Bench::~Bench() {
  cudaFree(flush_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaStreamDestroy(stream_);
}

std::string Bench::DeviceLine() const {
  cudaDeviceProp prop;
  Q38_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return absl::StrFormat("%s (sm_%d%d), %d SMs, %d MiB L2, %.0f GiB; driver CUDA %d.%d, runtime %d.%d", prop.name,
                         prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20,
                         prop.totalGlobalMem / double(1 << 30), driver / 1000, driver % 1000 / 10, runtime / 1000,
                         runtime % 1000 / 10);
}

void Bench::FlushL2() {
  Q38_CUDA_CHECK(cudaMemsetAsync(flush_, 0, flush_bytes_, stream_));
}

Timing Bench::Run(int iters, const Launch& launch, int repeats, int warmup, bool graph) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    Q38_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; ++i) launch(i, stream_);
    Q38_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    Q38_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    Q38_CUDA_CHECK(cudaGraphDestroy(g));
  }
  std::vector<double> us;
  for (int rep = 0; rep < warmup + repeats; ++rep) {
    FlushL2();
    Q38_CUDA_CHECK(cudaEventRecord(start_, stream_));
    if (graph) {
      Q38_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    } else {
      for (int i = 0; i < iters; ++i) launch(i, stream_);
    }
    Q38_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    Q38_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    Q38_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    if (rep >= warmup) us.push_back(1e3 * ms / iters);
  }
  Q38_CUDA_CHECK(cudaGetLastError());
  if (exec != nullptr) Q38_CUDA_CHECK(cudaGraphExecDestroy(exec));
  return {Median(us), *std::min_element(us.begin(), us.end()), *std::max_element(us.begin(), us.end())};
}

Timing Bench::Eager(int iters, const Launch& launch, int repeats, int warmup) {
  return Run(iters, launch, repeats, warmup, false);
}

Timing Bench::Graph(int iters, const Launch& launch, int repeats, int warmup) {
  return Run(iters, launch, repeats, warmup, true);
}

double Bench::StreamReadGBs() {
  const int64_t bytes = int64_t{1} << 30, words = bytes / 16;
  uint4* buf = nullptr;
  unsigned* sink = nullptr;
  Q38_CUDA_CHECK(cudaMalloc(&buf, bytes));
  Q38_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  FillKernel<<<sms_ * 8, 256, 0, stream_>>>(buf, words, 17u);
  Q38_CUDA_LAUNCHED();
  double best = 0;
  for (const bool no_l1 : {false, true}) {
    for (const int blocks_per_sm : {4, 8, 16}) {
      const Timing t = Run(
          1,
          [&](int, cudaStream_t s) {
            if (no_l1) {
              StreamReadKernel<true><<<sms_ * blocks_per_sm, 256, 0, s>>>(buf, words, sink);
            } else {
              StreamReadKernel<false><<<sms_ * blocks_per_sm, 256, 0, s>>>(buf, words, sink);
            }
            Q38_CUDA_LAUNCHED();
          },
          9, 2, false);
      best = std::max(best, bytes / (t.median_us * 1e3));
    }
  }
  Q38_CUDA_CHECK(cudaFree(buf));
  Q38_CUDA_CHECK(cudaFree(sink));
  return best;
}

double Bench::WmmaTflops() {
  float* sink = nullptr;
  Q38_CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  constexpr int kIters = 512, kThreadsPerBlock = 256;
  double best = 0;
  for (const int blocks_per_sm : {2, 4, 8}) {
    const int blocks = sms_ * blocks_per_sm;
    const Timing t = Run(
        1,
        [&](int, cudaStream_t s) {
          WmmaKernel<<<blocks, kThreadsPerBlock, 0, s>>>(kIters, sink);
          Q38_CUDA_LAUNCHED();
        },
        5, 1, false);
    const double flops = 2.0 * 16 * 16 * 16 * 4 * kIters * (double(blocks) * kThreadsPerBlock / 32);
    best = std::max(best, flops / (t.median_us * 1e6));
  }
  Q38_CUDA_CHECK(cudaFree(sink));
  return best;
}

int BenchMain(const char* name, const char* ok, const std::function<int(Bench&)>& run) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("%s: no CUDA device visible\n", name);
    return 0;
  }
  Bench b;
  std::printf("# %s on %s\n", name, b.DeviceLine().c_str());
  const int failures = run(b);
  std::printf("\n%s\n", failures == 0 ? ok : "MISMATCHES: see above");
  return failures == 0 ? 0 : 1;
}

}  // namespace q38::bench
