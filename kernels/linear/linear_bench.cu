// Lab bench of the dense FP16 linear kernels on one GPU (kernels/testing/bench_timing.h):
//  - the ceilings: stream-read bandwidth over 1 GiB, WMMA FP16 tensor-core rate;
//  - every decode GEMV shape of the model at TP1, TP2 and TP4 (T = 1; T = 4 for a few): the old
//    kernel ("v0", linear_gemv_v0.cuh), the route Linear() takes ("auto", ChooseGemv's
//    configuration) and, with --sweep, every configuration LinearGemv runs; µs per call
//    eagerly and inside a CUDA graph, GB/s and the share of the stream-read bandwidth;
//  - the generic GEMV Linear() falls back to where K is not a multiple of 8, at one decode shape;
//  - 100 small GEMVs of mixed shapes as one graph, beside 100 empty kernels: the per-call cost
//    as the decode graph sees it;
//  - the prefill GEMM (T > kGemvMaxRows) at the model's prefill shapes (a stacked projection
//    runs one product per part at T > 1, so the parts, not the stacks): the old single-buffered
//    tile (v0, linear_gemm_v0.cuh) and every pipelined tile in TFLOP/s against the WMMA rate,
//    each checked bitwise against v0.
// Weights are cold in the L2 as in a decode step (which reads GBs between two uses of a matrix):
// a batch of launches rotates among enough copies of the matrix to span 256 MB, after an L2
// flush; x is one buffer, hot after its first read, as the activation written just before.
// Every variant's output is checked against a CPU double-precision reference on sampled rows and
// against v0's on all; the exit status is 1 if one fails.
//
// Usage: linear_bench [--sweep] [--csv FILE]   (the CSV: one line per case and variant)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/linear/linear_cuda.h"
#include "kernels/linear/linear_gemm_v0.cuh"
#include "kernels/linear/linear_gemv_v0.cuh"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::Timing;
using bench::FillHalfKernel;
using cuda::GemvConfig;


__global__ void EmptyKernel() {}

using bench::DeviceArray;
using bench::ToHost;

// A GEMV variant: a name and how to launch it.
struct Variant {
  std::string name;
  GemvConfig config;  // for the sweep's configurations
  enum Kind { kV0, kAuto, kWide } kind;
};

void LaunchVariant(const Variant& v, const __half* x, const __half* w, __half* y, int64_t T, int64_t K, int64_t N,
                   cudaStream_t s) {
  switch (v.kind) {
    case Variant::kV0: cuda::gemv_v0::Launch(x, w, y, T, K, N, s); break;
    case Variant::kAuto: cuda::Linear(x, w, y, T, K, N, s); break;
    case Variant::kWide: cuda::LinearGemv(v.config, x, w, y, T, K, N, s); break;
  }
  Q38_CUDA_LAUNCHED();
}

std::string ConfigName(const GemvConfig& c) {
  return absl::StrFormat("g%d u%d s%d", c.lanes, c.unroll, c.splits);
}

struct Case {
  std::string name;
  std::string tp;  // "1", "2", "4" or "all" where the shape does not shard
  int64_t T, N, K;
};

std::vector<Case> DecodeCases() {
  std::vector<Case> cases;
  for (const int tp : {1, 2, 4}) {
    const std::string t = std::to_string(tp);
    cases.push_back({"GDN stack qkv/z/b/a", t, 1, 16480 / tp, 2560});
    cases.push_back({"attention stack", t, 1, 13952 / tp, 2560});
    cases.push_back({"router + shared expert", t, 1, 512 + 1280 / tp + 1, 2560});
    cases.push_back({"GDN out / attention o", t, 1, 2560, 6144 / tp});
    cases.push_back({"shared expert gate/up", t, 1, 1280 / tp, 2560});
    cases.push_back({"shared expert down", t, 1, 2560, 640 / tp});
    cases.push_back({"lm_head", t, 1, 248320 / tp, 2560});
  }
  cases.push_back({"HC up", "all", 1, 10240, 320});
  cases.push_back({"HC down", "all", 1, 324, 10240});
  cases.push_back({"final mixer down", "all", 1, 320, 10240});
  cases.push_back({"indexer k", "all", 1, 128, 2560});
  cases.push_back({"GDN stack qkv/z/b/a", "1", 4, 16480, 2560});
  cases.push_back({"GDN out / attention o", "1", 4, 2560, 6144});
  cases.push_back({"HC up", "all", 4, 10240, 320});
  cases.push_back({"router + shared expert", "1", 8, 1793, 2560});
  return cases;
}

// The weights of one case: enough copies of the matrix to span 256 MB (at least two, at most
// one per launch of a batch), filled with random values.
struct Operands {
  int64_t T, N, K, matrix_elems, stride_elems;
  int copies;
  std::unique_ptr<DeviceArray<__half>> w, x, y;
  Operands(int64_t T_, int64_t N_, int64_t K_, int iters, cudaStream_t s) : T(T_), N(N_), K(K_) {
    matrix_elems = N * K;
    stride_elems = (matrix_elems + 127) / 128 * 128;  // 256-byte aligned copies
    const double bytes = 2.0 * matrix_elems;
    copies = static_cast<int>(std::min<double>(iters, std::max(2.0, std::ceil(256e6 / bytes))));
    w = std::make_unique<DeviceArray<__half>>(stride_elems * copies);
    x = std::make_unique<DeviceArray<__half>>(T * K);
    y = std::make_unique<DeviceArray<__half>>(T * N);
    FillHalfKernel<<<1024, 256, 0, s>>>(w->p, stride_elems * copies, 1, 0.1f);
    FillHalfKernel<<<64, 256, 0, s>>>(x->p, T * K, 2, 2.0f);
    Q38_CUDA_LAUNCHED();
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const __half* W(int i) const { return w->p + (i % copies) * stride_elems; }
  double Bytes() const { return 2.0 * (N * K + T * K + T * N); }
};

// Batch size: about 300 µs of work at 3 TB/s plus 3 µs a call, 20 to 200 launches.
int Iters(double bytes) {
  const double us = bytes / 3e6 + 3;
  return static_cast<int>(std::clamp(300.0 / us, 20.0, 200.0));
}

// The CPU reference (double) against the first copy's result in y, on 32 sampled columns of every
// token row (T ≤ 16) or of 16 sampled rows (prefill); only those rows of x and y are read back.
double SampledError(const Operands& o, cudaStream_t s) {
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < std::min<int64_t>(o.T, 16); ++i) {
    tokens.push_back(o.T <= 16 ? i : (i * o.T) / 16 + (i * 7) % (o.T / 16));  // one in each sixteenth
  }
  std::vector<int64_t> cols = {0, o.N - 1};
  for (int i = 1; i < 30; ++i) cols.push_back(o.N * i / 30);
  double err = 0, ref = 0;
  for (const int64_t t : tokens) {
    const std::vector<float> x = ToHost(o.x->p + t * o.K, o.K), y = ToHost(o.y->p + t * o.N, o.N);
    for (const int64_t n : cols) {
      const std::vector<float> wr = ToHost(o.W(0) + n * o.K, o.K);
      double acc = 0;
      for (int64_t k = 0; k < o.K; ++k) acc += static_cast<double>(x[k]) * wr[k];
      const double got = y[n];
      if (!std::isfinite(got)) return INFINITY;
      err += (got - acc) * (got - acc);
      ref += acc * acc;
    }
  }
  return ref > 0 ? err / ref : err;
}

struct Row {
  std::string variant;
  Timing eager, graph;
  double nmse_ref, nmse_v0;
};

int RunDecode(Bench& b, double stream_gbs, bool sweep, FILE* csv) {
  std::vector<Variant> sweep_variants;
  if (sweep) {
    for (const int g : {8, 16, 32})
      for (const int u : {4, 8})
        for (const int s : {1, 2, 4, 8}) {
          const GemvConfig c{g, u, s};
          sweep_variants.push_back({ConfigName(c), c, Variant::kWide});
        }
  }
  int failures = 0;
  std::printf("\n## Decode GEMVs\n\nWeights cold in the L2; µs per call in a graph of a batch of calls and launched eagerly;\n"
              "auto is Linear() with ChooseGemv's configuration (g lanes a row, u runs a lane loaded at once,\n"
              "s warps a row); GB/s and %% of stream read from auto's graph time%s.\n\n",
              sweep ? "; the sweep's fastest where it beats auto" : "");
  std::printf("| shape [N, K] | TP | T | MB | v0 µs | v0 eager | auto | auto µs | auto eager | GB/s | %% stream | v0/auto | sweep best µs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : DecodeCases()) {
    const cudaStream_t s = b.stream();
    const int iters = Iters(2.0 * c.N * c.K);
    Operands o(c.T, c.N, c.K, iters, s);
    const GemvConfig chosen = cuda::ChooseGemv(c.T, c.K, c.N);
    std::vector<Variant> variants = {{"v0", {}, Variant::kV0}, {"auto", chosen, Variant::kAuto}};
    variants.insert(variants.end(), sweep_variants.begin(), sweep_variants.end());
    // v0's output, for comparing every variant on all of y.
    LaunchVariant(variants[0], o.x->p, o.W(0), o.y->p, c.T, c.K, c.N, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> y0 = ToHost(o.y->p, c.T * c.N);
    std::vector<Row> rows;
    for (const Variant& v : variants) {
      Q38_CUDA_CHECK(cudaMemsetAsync(o.y->p, 0xff, sizeof(__half) * c.T * c.N, s));  // NaN
      LaunchVariant(v, o.x->p, o.W(0), o.y->p, c.T, c.K, c.N, s);
      Row row{v.name, {}, {}, SampledError(o, s), 0};
      const std::vector<float> y = ToHost(o.y->p, c.T * c.N);
      double err = 0, ref = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        err += (static_cast<double>(y[i]) - y0[i]) * (static_cast<double>(y[i]) - y0[i]);
        ref += static_cast<double>(y0[i]) * y0[i];
      }
      row.nmse_v0 = std::isfinite(err) ? err / std::max(ref, 1e-30) : INFINITY;
      if (!(row.nmse_ref <= 1e-6 && row.nmse_v0 <= 1e-5)) {
        ++failures;
        std::printf("MISMATCH %s [%ld, %ld] T %ld %s: nmse %.2g against the reference, %.2g against v0\n", c.name.c_str(),
                    c.N, c.K, c.T, v.name.c_str(), row.nmse_ref, row.nmse_v0);
      }
      const bench::Launch launch = [&](int i, cudaStream_t st) { LaunchVariant(v, o.x->p, o.W(i), o.y->p, c.T, c.K, c.N, st); };
      const bool keep = v.kind != Variant::kWide;
      if (keep) row.eager = b.Eager(iters, launch);
      row.graph = b.Graph(iters, launch, keep ? 7 : 5, 1);
      rows.push_back(row);
      if (csv != nullptr) {
        std::fprintf(csv, "%s,%s,%ld,%ld,%ld,%s,%.3f,%.3f,%.3f,%.3f,%.1f,%.3g\n", c.name.c_str(), c.tp.c_str(), c.T, c.N,
                     c.K, v.name.c_str(), row.eager.median_us, row.graph.median_us, row.graph.min_us, row.graph.max_us,
                     o.Bytes() / (row.graph.median_us * 1e3), row.nmse_ref);
      }
    }
    // One line per case: v0, auto, and the fastest of the sweep.
    size_t best = 1;
    for (size_t i = 2; i < rows.size(); ++i)
      if (rows[i].graph.median_us < rows[best].graph.median_us) best = i;
    const double gbs = o.Bytes() / (rows[1].graph.median_us * 1e3);
    std::printf("| %s [%ld, %ld] | %s | %ld | %.2f | %.2f | %.2f | %s | %.2f | %.2f | %.0f | %.1f%% | %.2f× | %s |\n",
                c.name.c_str(), c.N, c.K, c.tp.c_str(), c.T, o.Bytes() / 1e6, rows[0].graph.median_us,
                rows[0].eager.median_us, ConfigName(chosen).c_str(), rows[1].graph.median_us, rows[1].eager.median_us, gbs,
                100 * gbs / stream_gbs, rows[0].graph.median_us / rows[1].graph.median_us,
                best == 1 ? "" : absl::StrFormat("%s %.2f", rows[best].variant, rows[best].graph.median_us).c_str());
    std::fflush(stdout);
  }
  return failures;
}

// The generic GEMV that Linear() takes where K is not a multiple of 8 (or a pointer is not
// 16-byte aligned): a decode shape with K = 2,556, weights cold, against the double reference.
int RunScalar(Bench& b, double stream_gbs) {
  const cudaStream_t s = b.stream();
  std::printf("\n## Generic GEMV (K %% 8 != 0), [2560, 2556]\n\n| T | µs | GB/s | %% stream | nmse vs reference |\n"
              "|---|---|---|---|---|\n");
  int failures = 0;
  for (const int64_t T : {int64_t{1}, int64_t{4}}) {
    const int64_t N = 2560, K = 2556;
    const int iters = Iters(2.0 * N * K);
    Operands o(T, N, K, iters, s);
    cuda::Linear(o.x->p, o.W(0), o.y->p, T, K, N, s);
    Q38_CUDA_LAUNCHED();
    const double nmse = SampledError(o, s);
    failures += nmse <= 1e-6 ? 0 : 1;
    const Timing t = b.Graph(iters, [&](int i, cudaStream_t st) { cuda::Linear(o.x->p, o.W(i), o.y->p, T, K, N, st); });
    const double gbs = o.Bytes() / (t.median_us * 1e3);
    std::printf("| %ld | %.2f | %.0f | %.1f%% | %.2g%s |\n", T, t.median_us, gbs, 100 * gbs / stream_gbs, nmse,
                nmse <= 1e-6 ? "" : " MISMATCH");
  }
  std::fflush(stdout);
  return failures;
}

// 100 small GEMVs of mixed shapes in one graph (weights cold), v0 against auto, beside 100
// empty kernels: per-call cost as the decode graph sees it.
void RunSmallGraph(Bench& b, double stream_gbs) {
  const std::vector<Case> smalls = {{"HC up", "", 1, 10240, 320},     {"HC down", "", 1, 324, 10240},
                                    {"indexer k", "", 1, 128, 2560},  {"shared expert down", "", 1, 2560, 640},
                                    {"router + shared", "", 1, 1793, 2560}};
  const cudaStream_t s = b.stream();
  constexpr int kCalls = 100;
  std::vector<std::unique_ptr<Operands>> ops;
  double bytes = 0;
  for (const Case& c : smalls) ops.push_back(std::make_unique<Operands>(c.T, c.N, c.K, kCalls, s));
  for (int i = 0; i < kCalls; ++i) bytes += ops[i % ops.size()]->Bytes();
  std::printf("\n## %d small GEMVs in one CUDA graph (HC up, HC down, indexer k, shared expert down, router + shared in turn; weights cold)\n\n", kCalls);
  std::printf("| variant | µs per call | GB/s | %% stream |\n|---|---|---|---|\n");
  const Timing empty = b.Graph(kCalls, [&](int, cudaStream_t st) { EmptyKernel<<<1, 32, 0, st>>>(); });
  std::printf("| empty kernel | %.2f | | |\n", empty.median_us);
  for (const Variant& v : {Variant{"v0", {}, Variant::kV0}, Variant{"auto", {}, Variant::kAuto}}) {
    const Timing t = b.Graph(kCalls, [&](int i, cudaStream_t st) {
      const Operands& o = *ops[i % ops.size()];
      LaunchVariant(v, o.x->p, o.W(i / static_cast<int>(ops.size())), o.y->p, o.T, o.K, o.N, st);
    });
    const double gbs = bytes / kCalls / (t.median_us * 1e3);
    std::printf("| %s | %.2f | %.0f | %.1f%% |\n", v.name.c_str(), t.median_us, gbs, 100 * gbs / stream_gbs);
  }
  std::fflush(stdout);
}

// The prefill GEMM (Linear() with T > kGemvMaxRows) at the model's prefill shapes at TP1 and a
// square-ish reference shape: v0 (the single-buffered 64×64 tile before), every tile of
// LinearGemm, and auto (ChooseGemm's). TFLOP/s and the share of the WMMA rate measured in this
// process; every variant's y is compared with v0's (the same sums in the same order: equal bits
// expected) and with a double-precision reference on sampled rows. Returns the mismatches.
int RunGemm(Bench& b, double wmma_tflops) {
  struct GemmCase {
    std::string name;
    int64_t T, N, K;
  };
  const std::vector<GemmCase> cases = {
      {"reference [8192 × 2560]·[2560 × 10240], GDN qkv", 8192, 10240, 2560},
      {"GDN z, attention q and gate", 8192, 6144, 2560},
      {"shared expert gate/up", 8192, 1280, 2560},
      {"attention k and v, indexer q, router", 8192, 512, 2560},
      {"indexer raw key", 8192, 128, 2560},
      {"GDN b and a", 8192, 48, 2560},
      {"shared expert gate", 8192, 1, 2560},
      {"GDN out / attention o", 8192, 2560, 6144},
      {"shared expert down", 8192, 2560, 640},
      {"HC up", 8192, 10240, 320},
      {"HC down", 8192, 324, 10240},
      {"GDN z, 512 tokens", 512, 6144, 2560},
      {"GDN out, 512 tokens", 512, 2560, 6144},
  };
  std::printf("\n## Prefill GEMM (WMMA, T > %ld)\n\nTFLOP/s (%% of the WMMA rate above) per variant; auto is ChooseGemm's tile.\n\n",
              cuda::kGemvMaxRows);
  std::string header = "| shape | T | N | K | v0 |", rule = "|---|---|---|---|---|";
  for (const cuda::GemmTile tile : cuda::kGemmTiles) {
    header += absl::StrFormat(" %s |", cuda::GemmTileName(tile));
    rule += "---|";
  }
  std::printf("%s auto | auto ms | auto/v0 |\n%s---|---|---|\n", header.c_str(), rule.c_str());
  int failures = 0;
  for (const GemmCase& c : cases) {
    const cudaStream_t s = b.stream();
    Operands o(c.T, c.N, c.K, 2, s);
    const double flop = 2.0 * c.T * c.N * c.K;
    auto time = [&](const bench::Launch& launch) { return b.Eager(2, launch, 5, 1).median_us; };
    const double v0_us = time([&](int i, cudaStream_t st) { cuda::gemm_v0::Launch(o.x->p, o.W(i), o.y->p, c.T, c.K, c.N, st); });
    auto raw_y = [&] {
      std::vector<uint16_t> y(c.T * c.N);
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      Q38_CUDA_CHECK(cudaMemcpy(y.data(), o.y->p, y.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
      return y;
    };
    cuda::gemm_v0::Launch(o.x->p, o.W(0), o.y->p, c.T, c.K, c.N, s);
    Q38_CUDA_LAUNCHED();
    const std::vector<uint16_t> y0 = raw_y();
    std::string cells;
    // Sampled outputs against a double-precision sum (normalized squared error), all against v0.
    auto check = [&](const std::string& name) {
      const double nmse = SampledError(o, s);
      const std::vector<uint16_t> y = raw_y();
      int64_t differ = 0;
      for (size_t i = 0; i < y.size(); ++i) differ += y[i] != y0[i];
      if (!(nmse <= 1e-6) || differ != 0) {
        ++failures;
        std::printf("MISMATCH prefill %s T %ld %s: nmse %.2g against the reference, %ld of %zu outputs differ from v0\n",
                    c.name.c_str(), c.T, name.c_str(), nmse, differ, y.size());
      }
    };
    for (const cuda::GemmTile tile : cuda::kGemmTiles) {
      Q38_CUDA_CHECK(cudaMemsetAsync(o.y->p, 0xff, sizeof(__half) * c.T * c.N, s));
      cuda::LinearGemm(tile, o.x->p, o.W(0), o.y->p, c.T, c.K, c.N, s);
      check(cuda::GemmTileName(tile));
      const double us = time([&](int i, cudaStream_t st) { cuda::LinearGemm(tile, o.x->p, o.W(i), o.y->p, c.T, c.K, c.N, st); });
      cells += absl::StrFormat(" %.1f (%.0f%%) |", flop / (us * 1e6), 100 * flop / (us * 1e6) / wmma_tflops);
    }
    Q38_CUDA_CHECK(cudaMemsetAsync(o.y->p, 0xff, sizeof(__half) * c.T * c.N, s));
    cuda::Linear(o.x->p, o.W(0), o.y->p, c.T, c.K, c.N, s);
    check("auto");
    const double auto_us = time([&](int i, cudaStream_t st) { cuda::Linear(o.x->p, o.W(i), o.y->p, c.T, c.K, c.N, st); });
    std::printf("| %s | %ld | %ld | %ld | %.1f (%.0f%%) |%s %s %.1f (%.0f%%) | %.3f | %.2f× |\n", c.name.c_str(), c.T, c.N,
                c.K, flop / (v0_us * 1e6), 100 * flop / (v0_us * 1e6) / wmma_tflops, cells.c_str(),
                cuda::GemmTileName(cuda::ChooseGemm(c.T, c.K, c.N)), flop / (auto_us * 1e6),
                100 * flop / (auto_us * 1e6) / wmma_tflops, auto_us / 1e3, v0_us / auto_us);
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  bool sweep = false;
  FILE* csv = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv = std::fopen(argv[++i], "w");
      if (csv == nullptr) { std::fprintf(stderr, "cannot write %s\n", argv[i]); return 2; }
      std::fprintf(csv, "case,tp,T,N,K,variant,eager_us,graph_us,graph_min_us,graph_max_us,graph_GBps,nmse\n");
    } else {
      std::fprintf(stderr, "usage: linear_bench [--sweep] [--csv FILE]\n");
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("linear_bench: no CUDA device visible\n");
    return 0;
  }
  q38::bench::Bench b;
  std::printf("# linear_bench on %s\n\n", b.DeviceLine().c_str());
  const double stream_gbs = b.StreamReadGBs(), wmma = b.WmmaTflops();
  std::printf("ceilings: stream read %.0f GB/s (1 GiB, 16-byte loads); WMMA FP16→FP32 %.1f TFLOP/s\n", stream_gbs, wmma);
  std::fflush(stdout);
  int failures = q38::RunDecode(b, stream_gbs, sweep, csv);
  failures += q38::RunScalar(b, stream_gbs);
  q38::RunSmallGraph(b, stream_gbs);
  failures += q38::RunGemm(b, wmma);
  if (csv != nullptr) std::fclose(csv);
  std::printf("\n%s\n", failures == 0 ? "every variant matches the reference" : "MISMATCHES: see above");
  return failures == 0 ? 0 : 1;
}
