// Lab bench of the routed experts on one GPU (kernels/testing/bench_timing.h): cuda::RoutedExperts
// with NVFP4 weights at the full-size shapes (512 experts, top-10, H = 2560, I = 640 split over TP
// 1, 2 and 4), one token (decode: gate/up, down and combine, in a CUDA graph of 40 calls as a
// decode step makes them, eagerly in brackets), 2,048 and 8,192 tokens (prefill: the grouped WMMA
// route on each of its block tiles, each checked bitwise against the route's own, and its two
// GEMMs timed apart).
// Each call routes to other experts (64 seeded routings in turn), so the weights come from DRAM.
// Prints µs per call, GB/s of expert weights read against the measured stream read (decode) and
// useful TFLOP/s against the measured WMMA rate (prefill), and a digest of the output bits of one
// fixed call, so that two builds run on one machine show whether their results are bitwise equal.
// Then, for one token, the block after the router with the gated shared expert: the six kernels
// the model ran before (SiLU·up, the shared GEMV, the routed experts adding it) against the two of
// ExpertsAndSharedDecode (within 2e-3; the exit status is 1 if not), and DownCombineKernel alone
// in each of its instances (shared-expert warps, register cap), within 1e-3 of the launched one.
// Last, the two decode kernels apart (gate/up with SiLU·up, down into FP32 per pair): the shapes
// RoutedExperts launches (gate/up's lane groups, down's chunked kernel), checked bitwise against
// it, and the other lane-group shapes (1, 2 or 4 rows a lane group, a lane's first runs loaded
// ahead or not), checked bitwise where they sum in the launched order and within 1e-3 of it where
// they do not. Then RouterTopK at one token and at 8,192, against a top-k taken on the host.
// Usage: moe_bench [--prefill]   (--prefill: the prefill rows only, for a profiler)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/linear/linear_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_decode.cuh"
#include "kernels/moe/moe_grouped.cuh"
#include "kernels/testing/bench_checks.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::Digest;
using bench::HashUnit;
using bench::RelativeGap;
using bench::Timing;

constexpr int64_t kExperts = 512, kTopK = 10, kHidden = 2560, kIntermediate = 640, kRoutings = 64;

__global__ void FillBytesKernel(uint8_t* p, int64_t n, uint32_t seed, bool scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = static_cast<uint32_t>((HashUnit(i, seed) + 0.5f) * 16777216.0f);
    // Scales as E4M3 with exponent field 4..6 (2⁻³..2⁻¹), so the activations stay O(1).
    p[i] = scale ? static_cast<uint8_t>(((4 + h % 3) << 3) | ((h >> 4) % 8)) : static_cast<uint8_t>(h);
  }
}

// Distinct experts per token with weights summing to about 1.
__global__ void FillRoutingKernel(int32_t* idx, __half* w, int64_t T, int64_t k, int64_t E, uint32_t seed) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const int64_t stride = E / k;
  const int64_t base = static_cast<int64_t>((HashUnit(t, seed) + 0.5f) * E);
  for (int64_t j = 0; j < k; ++j) {
    idx[t * k + j] = static_cast<int32_t>((base + j * stride) % E);
    w[t * k + j] = __float2half(1.0f / k + 0.02f * HashUnit(t * k + j, seed + 1));
  }
}

struct Projection {
  int64_t N, K;
  std::unique_ptr<DeviceArray<uint8_t>> codes, scales;
  std::unique_ptr<DeviceArray<float>> global;
  Projection(int64_t N_, int64_t K_, uint32_t seed, cudaStream_t s) : N(N_), K(K_) {
    codes = std::make_unique<DeviceArray<uint8_t>>(kExperts * N * K / 2);
    scales = std::make_unique<DeviceArray<uint8_t>>(kExperts * N * K / 16);
    global = std::make_unique<DeviceArray<float>>(kExperts);
    FillBytesKernel<<<4096, 256, 0, s>>>(codes->p, kExperts * N * K / 2, seed, false);
    FillBytesKernel<<<1024, 256, 0, s>>>(scales->p, kExperts * N * K / 16, seed + 1, true);
    const std::vector<float> g(kExperts, 0.5f);
    Q38_CUDA_CHECK(cudaMemcpyAsync(global->p, g.data(), kExperts * sizeof(float), cudaMemcpyHostToDevice, s));
    Q38_CUDA_LAUNCHED();
  }
  cuda::ExpertProjection View(int64_t split) const {
    return {.codes = codes->p, .scales = scales->p, .global_a = global->p, .global_b = global->p, .split = split, .N = N, .K = K};
  }
  double BytesPerExpert() const { return N * K / 2.0 + N * K / 16.0; }
};

using Nvfp4 = cuda::moe_decode::Nvfp4Rows;

// What the decode kernels read and write at one TP, and RoutedExperts' act and pair_out for
// routing 0 (their bits, and as floats).
struct DecodeSetup {
  Bench& b;
  int tp;
  Nvfp4 gate_up, down;
  const __half* h;
  const int32_t* idx;
  __half* act;
  float* pair_out;
  uint64_t want_act, want_out;
  std::vector<float> act_values, out_values;
};

// One decode kernel shape (`call(i, stream)` runs it on routing i), timed in a graph of 40 calls
// on rotating routings; prints its row. The shape RoutedExperts launches (`launched`) must give
// its output bit for bit; the others sum in another order and must come within 1e-3 of the
// largest output. Returns 1 if not.
int DecodeKernelRow(const DecodeSetup& d, bool gate_up, const std::string& shape, bool launched,
                    const bench::Launch& call) {
  const cudaStream_t s = d.b.stream();
  const int64_t I = d.down.K, H = d.down.N;
  call(0, s);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  bool ok;
  std::string verdict;
  if (launched) {
    ok = gate_up ? Digest(d.act, kTopK * I) == d.want_act : Digest(d.pair_out, kTopK * H) == d.want_out;
    verdict = ok ? "bitwise" : "NOT BITWISE";
  } else {
    std::vector<float> got(gate_up ? kTopK * I : kTopK * H);
    if (gate_up) {
      got = bench::ToHost(d.act, got.size());
    } else {
      Q38_CUDA_CHECK(cudaMemcpy(got.data(), d.pair_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    const double gap = RelativeGap(got, gate_up ? d.act_values : d.out_values);
    ok = gap <= 1e-3;
    verdict = absl::StrFormat("%.1e%s", gap, ok ? "" : " TOO FAR");
  }
  const double bytes = kTopK * (gate_up ? 2 * I * kHidden : kHidden * I) * (0.5 + 1.0 / 16);
  const Timing t = d.b.Graph(40, call);
  std::printf("| %d | %s | %s%s | %.2f | %.0f | %s |\n", d.tp, gate_up ? "gate/up" : "down", shape.c_str(),
              launched ? " (launched)" : "", t.median_us, bytes / (t.median_us * 1e3), verdict.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// A lane-group kernel with kRows rows a group and kAhead runs loaded ahead; `launched` for the
// shape RoutedExperts runs.
template <bool kGateUp, int kRows, int kAhead>
int LaneGroupRow(const DecodeSetup& d, bool launched = false) {
  return DecodeKernelRow(d, kGateUp, absl::StrFormat("lane groups, %d rows, %d ahead", kRows, kAhead), launched,
                         [&](int i, cudaStream_t st) {
                           const int32_t* ix = d.idx + (i % kRoutings) * kTopK;
                           if constexpr (kGateUp) {
                             cuda::moe_decode::LaunchGateUp<Nvfp4, kRows, kAhead>(d.h, ix, d.gate_up, d.act, kTopK, kTopK, st);
                           } else {
                             cuda::moe_decode::LaunchDown<Nvfp4, kRows, kAhead>(d.act, ix, d.down, d.pair_out, kTopK, st);
                           }
                         });
}

// RouterTopK at one token (rotating over kRoutings rows of logits) and at 8,192 tokens: µs in a
// graph, and its experts and weights against a top-k taken here from the same FP16 logits (the
// larger logit first, ties to the lower id; weights within 2e-3 of the renormalized softmax).
// Returns the number of tokens that disagree.
int Router(Bench& b) {
  const cudaStream_t s = b.stream();
  constexpr int64_t kTokens = 8192;
  DeviceArray<__half> logits(kTokens * kExperts), w(kTokens * kTopK);
  DeviceArray<int32_t> idx(kTokens * kTopK);
  bench::FillHalfKernel<<<1024, 256, 0, s>>>(logits.p, kTokens * kExperts, 31, 4.0f);
  Q38_CUDA_LAUNCHED();
  cuda::RouterTopK(logits.p, idx.p, w.p, kTokens, kExperts, kTopK, s);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> lg = bench::ToHost(logits.p, kTokens * kExperts), got_w = bench::ToHost(w.p, kTokens * kTopK);
  std::vector<int32_t> got(kTokens * kTopK);
  Q38_CUDA_CHECK(cudaMemcpy(got.data(), idx.p, got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  int wrong = 0;
  double worst = 0;
  std::vector<int32_t> order(kExperts);
  for (int64_t t = 0; t < kTokens; ++t) {
    const float* l = lg.data() + t * kExperts;
    for (int32_t e = 0; e < kExperts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + kTopK, order.end(),
                      [&](int32_t a, int32_t c) { return l[a] > l[c] || (l[a] == l[c] && a < c); });
    double top = 0;
    for (int64_t j = 0; j < kTopK; ++j) top += std::exp(static_cast<double>(l[order[j]]) - l[order[0]]);
    bool ok = true;
    for (int64_t j = 0; j < kTopK; ++j) {
      ok = ok && got[t * kTopK + j] == order[j];
      const double want = std::exp(static_cast<double>(l[order[j]]) - l[order[0]]) / top;
      worst = std::max(worst, std::fabs(got_w[t * kTopK + j] - want) / want);
    }
    wrong += ok ? 0 : 1;
  }
  const bool weights_ok = worst <= 2e-3;
  std::printf("\n## Router top-%lld of %lld\n\nµs per call in a CUDA graph of 40; logits GB/s; experts checked "
              "against a top-k taken here, weights by their largest relative gap.\n\n"
              "| tokens | µs | logits GB/s | tokens with other experts | weights' largest gap |\n|---|---|---|---|---|\n",
              static_cast<long long>(kTopK), static_cast<long long>(kExperts));
  for (int64_t T : {int64_t{1}, kTokens}) {
    const Timing t = b.Graph(40, [&](int i, cudaStream_t st) {
      const int64_t row = T == 1 ? i % kRoutings : 0;
      cuda::RouterTopK(logits.p + row * kExperts, idx.p, w.p, T, kExperts, kTopK, st);
    });
    std::printf("| %lld | %.2f | %.1f | %d of %lld | %.1e%s |\n", static_cast<long long>(T), t.median_us,
                T * kExperts * 2.0 / (t.median_us * 1e3), wrong, static_cast<long long>(kTokens), worst,
                weights_ok ? "" : " TOO FAR");
  }
  return wrong + (weights_ok ? 0 : 1);
}

// The decode kernels apart at TP1, 2 and 4: gate/up's lane groups (RoutedExperts runs 1 row, 0
// ahead) and down's chunked kernel, which RoutedExperts runs, beside the lane groups it replaced,
// in the shapes of their sweep.
int DecodeKernels(Bench& b) {
  const cudaStream_t s = b.stream();
  int failures = 0;
  std::printf("\n## Decode kernels apart, one token\n\nµs per call in a CUDA graph of 40, weights GB/s; the launched "
              "kernel checked bitwise against RoutedExperts, the others by their largest gap from it (relative to "
              "the largest output).\n\n"
              "| TP | kernel | shape | µs | GB/s | against the launched |\n"
              "|---|---|---|---|---|---|\n");
  for (int tp : {1, 2, 4}) {
    const int64_t I = kIntermediate / tp;
    const Projection gu_w(2 * I, kHidden, 10 + tp, s), dn_w(kHidden, I, 20 + tp, s);
    DeviceArray<__half> h(kHidden), w(kRoutings * kTopK), act(kTopK * I), out(kHidden);
    DeviceArray<int32_t> idx(kRoutings * kTopK);
    DeviceArray<float> pair_out(kTopK * kHidden);
    bench::FillHalfKernel<<<16, 256, 0, s>>>(h.p, kHidden, 7, 4.0f);
    for (int r = 0; r < kRoutings; ++r) FillRoutingKernel<<<1, 32, 0, s>>>(idx.p + r * kTopK, w.p + r * kTopK, 1, kTopK, kExperts, 100 + r);
    Q38_CUDA_LAUNCHED();
    const cuda::ExpertScratch scratch{act.p, pair_out.p, nullptr};
    const auto launched = [&] {  // act and pair_out of routing 0 as RoutedExperts leaves them
      cuda::RoutedExperts(h.p, idx.p, w.p, gu_w.View(I), dn_w.View(kHidden), out.p, scratch, 1, kTopK, kExperts, s);
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    };
    launched();
    DecodeSetup d{b, tp, Nvfp4::Of(gu_w.View(I)), Nvfp4::Of(dn_w.View(kHidden)), h.p, idx.p, act.p, pair_out.p,
                  Digest(act.p, kTopK * I), Digest(pair_out.p, kTopK * kHidden), bench::ToHost(act.p, kTopK * I),
                  std::vector<float>(kTopK * kHidden)};
    Q38_CUDA_CHECK(cudaMemcpy(d.out_values.data(), pair_out.p, kTopK * kHidden * sizeof(float), cudaMemcpyDeviceToHost));
    failures += LaneGroupRow<true, 1, 0>(d, true) + LaneGroupRow<true, 2, 0>(d) + LaneGroupRow<true, 1, 3>(d) +
                LaneGroupRow<true, 1, 5>(d);
    launched();  // down reads routing 0's act
    const bool chunked = cuda::moe_decode::ChunksFit(d.down);
    if (chunked) {
      failures += DecodeKernelRow(d, false, absl::StrFormat("chunks, %d lanes a row", cuda::moe_decode::ChunkLanes(d.down.K)),
                                  true, [&](int i, cudaStream_t st) {
                                    cuda::moe_decode::LaunchDownChunks(d.act, d.idx + (i % kRoutings) * kTopK, d.down,
                                                                       d.pair_out, kTopK, st);
                                  });
    }
    failures += LaneGroupRow<false, 1, 0>(d) + LaneGroupRow<false, 2, 0>(d) + LaneGroupRow<false, 4, 0>(d) +
                LaneGroupRow<false, 1, 3>(d) + LaneGroupRow<false, 2, 3>(d, !chunked) + LaneGroupRow<false, 4, 3>(d);
  }
  return failures;
}

// The grouped route's two GEMMs apart on one tile shape, on the grouping RoutedExperts left in
// `groups` for routing 0 (gate/up then down, each in a graph of `iters`): "µs (TFLOP/s)" each.
template <typename Shape>
std::string GroupedGemms(Bench& b, const Nvfp4& gate_up, const Nvfp4& down, const __half* h, const int32_t* idx,
                         cuda::ExpertScratch s, int64_t T, int iters) {
  const int64_t pairs = T * kTopK, tiles = cuda::moe_grouped::TileBound(pairs, kExperts, Shape::kBM);
  cuda::moe_grouped::LaunchGroupPairs(idx, pairs, kExperts, Shape::kBM, s.groups, b.stream());
  const Timing g = b.Graph(iters, [&](int, cudaStream_t st) {
    cuda::moe_grouped::LaunchGateUp<Shape>(h, gate_up, s.groups, s.act, pairs, kTopK, kExperts, tiles, st);
  });
  const Timing d = b.Graph(iters, [&](int, cudaStream_t st) {
    cuda::moe_grouped::LaunchDown<Shape>(s.act, down, s.groups, s.pair_out, pairs, kExperts, tiles, st);
  });
  const double flops = 2.0 * pairs * down.K * down.N;  // down's; gate/up's is twice it
  return absl::StrFormat("%.0f (%.1f) | %.0f (%.1f)", g.median_us, 2 * flops / (g.median_us * 1e6), d.median_us,
                         flops / (d.median_us * 1e6));
}

int Run(Bench& b, bool prefill_only) {
  const cudaStream_t s = b.stream();
  int failures = 0;
  std::vector<std::string> shared_rows, combine_rows;
  const double stream_gbs = b.StreamReadGBs(), wmma = b.WmmaTflops();
  std::printf("\nstream read %.0f GB/s, WMMA FP16 %.0f TFLOP/s (measured here)\n", stream_gbs, wmma);
  std::printf("\n## Routed experts, NVFP4, 512 experts, top-10, H = 2560\n\n"
              "| TP | I | tokens | grouped tile | µs per call (eager) | weights GB/s | share of stream read | useful TFLOP/s | share of WMMA | gate/up µs (TFLOP/s) | down µs (TFLOP/s) | output digest |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int tp : {1, 2, 4}) {
    const int64_t I = kIntermediate / tp;
    const Projection gate_up(2 * I, kHidden, 10 + tp, s), down(kHidden, I, 20 + tp, s);
    for (int64_t T : {int64_t{1}, int64_t{2048}, int64_t{8192}}) {
      if (T == 1 && prefill_only) continue;
      const int routings = T == 1 ? kRoutings : 2;
      DeviceArray<__half> h(T * kHidden), out(T * kHidden), w(routings * T * kTopK);
      DeviceArray<int32_t> idx(routings * T * kTopK), groups(cuda::ExpertGroupsInts(T * kTopK, kExperts));
      DeviceArray<__half> act(T * kTopK * I);
      DeviceArray<float> pair_out(T * kTopK * kHidden);
      bench::FillHalfKernel<<<1024, 256, 0, s>>>(h.p, T * kHidden, 7, 4.0f);
      for (int r = 0; r < routings; ++r) {
        FillRoutingKernel<<<(T + 255) / 256, 256, 0, s>>>(idx.p + r * T * kTopK, w.p + r * T * kTopK, T, kTopK, kExperts, 100 + r);
      }
      Q38_CUDA_LAUNCHED();
      const cuda::ExpertScratch scratch{act.p, pair_out.p, groups.p};
      std::optional<cuda::GroupedTile> tile;  // unset: the route's choice
      const bench::Launch call = [&](int i, cudaStream_t st) {
        const int r = i % routings;
        cuda::RoutedExperts(h.p, idx.p + r * T * kTopK, w.p + r * T * kTopK, gate_up.View(I), down.View(kHidden), out.p,
                            scratch, T, kTopK, kExperts, st, {}, tile);
      };
      call(0, s);
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      const uint64_t digest = Digest(out.p, T * kHidden);
      const int iters = T == 1 ? 40 : 2;
      const double bytes = T == 1 ? kTopK * (gate_up.BytesPerExpert() + down.BytesPerExpert()) : 0;
      const double flops = 2.0 * T * kTopK * (2 * I * kHidden + kHidden * I);
      if (T == 1) {
        const Timing g = b.Graph(iters, call), e = b.Eager(iters, call);
        std::printf("| %d | %lld | 1 | | %.2f (%.2f) | %.0f | %.1f%% | | | | | %016llx |\n", tp, static_cast<long long>(I),
                    g.median_us, e.median_us, bytes / (g.median_us * 1e3), 100 * bytes / (g.median_us * 1e3) / stream_gbs,
                    static_cast<unsigned long long>(digest));
        // The block after the router as the model ran it before (the shared expert's SiLU·up and
        // GEMV, then the routed experts, whose sum adds it: 6 kernels) and as the two decode
        // kernels run it (ExpertsAndSharedDecode).
        const int64_t Is = I;
        DeviceArray<__half> shared_gu(2 * Is), shared_down(kHidden * Is), shared_act(Is), shared(kHidden), gate(1),
            out2(kHidden);
        bench::FillHalfKernel<<<16, 256, 0, s>>>(shared_gu.p, 2 * Is, 8, 4.0f);
        bench::FillHalfKernel<<<1024, 256, 0, s>>>(shared_down.p, kHidden * Is, 10, 0.1f);
        bench::FillHalfKernel<<<1, 32, 0, s>>>(gate.p, 1, 9, 4.0f);
        Q38_CUDA_LAUNCHED();
        const bench::Launch before = [&](int i, cudaStream_t st) {
          const int r = i % routings;
          cuda::SiluMul(shared_gu.p, shared_act.p, 1, Is, st);
          cuda::Linear(shared_act.p, shared_down.p, shared.p, 1, Is, kHidden, st);
          cuda::RoutedExperts(h.p, idx.p + r * kTopK, w.p + r * kTopK, gate_up.View(I), down.View(kHidden), out.p,
                              scratch, 1, kTopK, kExperts, st, cuda::GatedShared{shared.p, gate.p, 1});
        };
        const cuda::SharedExpert se{shared_gu.p, shared_down.p, Is, gate.p, 1};
        const bench::Launch after = [&](int i, cudaStream_t st) {
          const int r = i % routings;
          cuda::ExpertsAndSharedDecode(h.p, idx.p + r * kTopK, w.p + r * kTopK, gate_up.View(I), down.View(kHidden),
                                       out2.p, act.p, 1, kTopK, se, st);
        };
        before(0, s);
        after(0, s);
        Q38_CUDA_CHECK(cudaStreamSynchronize(s));
        const double gap = RelativeGap(bench::ToHost(out2.p, kHidden), bench::ToHost(out.p, kHidden));
        const bool near = gap <= 2e-3;
        failures += near ? 0 : 1;
        const double block_bytes = bytes + kHidden * Is * 2.0;
        const Timing tb = b.Graph(iters, before), ta = b.Graph(iters, after);
        // DownCombineKernel alone in each instance, on the act the launched pair left.
        after(0, s);
        Q38_CUDA_CHECK(cudaStreamSynchronize(s));  // the bench's stream does not block the copy's
        const std::vector<float> launched_out = bench::ToHost(out2.p, kHidden);
        const cuda::moe_decode::SharedDown sd{shared_gu.p, shared_down.p, static_cast<int>(Is), gate.p, 1};
        const Nvfp4 dn = Nvfp4::Of(down.View(kHidden));
        const auto& chosen = cuda::moe_decode::ChosenDownCombine(cuda::moe_decode::ChunkLanes(dn.K));
        for (const auto& v : cuda::moe_decode::kDownCombineVariants) {
          const bench::Launch one = [&](int i, cudaStream_t st) {
            const int r = i % routings;
            cuda::moe_decode::LaunchDownCombine(act.p, idx.p + r * kTopK, w.p + r * kTopK, dn, sd, out2.p, 1, kTopK, st,
                                                &v);
          };
          one(0, s);
          Q38_CUDA_LAUNCHED();
          Q38_CUDA_CHECK(cudaStreamSynchronize(s));
          const double vgap = RelativeGap(bench::ToHost(out2.p, kHidden), launched_out);
          failures += vgap <= 1e-3 ? 0 : 1;
          const Timing tv = b.Graph(iters, one);
          const double down_bytes = kTopK * down.BytesPerExpert() + kHidden * Is * 2.0;
          combine_rows.push_back(absl::StrFormat("| %d | %d | %d%s | %.2f | %.0f | %.1e%s |", tp,
                                                 v.shape.shared_warps, v.shape.max_regs,
                                                 &v == &chosen ? " (launched)" : "", tv.median_us,
                                                 down_bytes / (tv.median_us * 1e3), vgap, vgap <= 1e-3 ? "" : " TOO FAR"));
        }
        char line[256];
        std::snprintf(line, sizeof line, "| %d | %.2f | %.2f | %.0f (%.1f%%) | %.1e%s |", tp, tb.median_us, ta.median_us,
                      block_bytes / (ta.median_us * 1e3), 100 * block_bytes / (ta.median_us * 1e3) / stream_gbs, gap,
                      near ? "" : " TOO FAR");
        shared_rows.emplace_back(line);
      } else {
        // Every tile of the grouped route; each must give the route's output bit for bit.
        for (const cuda::GroupedTile t : cuda::kGroupedTiles) {
          tile = t;
          call(0, s);
          Q38_CUDA_CHECK(cudaStreamSynchronize(s));
          const uint64_t got = Digest(out.p, T * kHidden);
          failures += got == digest ? 0 : 1;
          const Timing g = b.Graph(iters, call), e = b.Eager(iters, call);
          const Nvfp4 gu = Nvfp4::Of(gate_up.View(I)), dn = Nvfp4::Of(down.View(kHidden));
          std::string apart;
          cuda::moe_grouped::WithTile(t, [&](auto shape) {
            apart = GroupedGemms<decltype(shape)>(b, gu, dn, h.p, idx.p, scratch, T, iters);
          });
          const bool routed = t == cuda::ChooseGroupedTile(T * kTopK, kExperts);
          std::printf("| %d | %lld | %lld | %s%s | %.0f (%.0f) | | | %.1f | %.1f%% | %s | %016llx%s |\n", tp,
                      static_cast<long long>(I), static_cast<long long>(T), cuda::GroupedTileName(t),
                      routed ? " (routed)" : "", g.median_us,
                      e.median_us, flops / (g.median_us * 1e6), 100 * flops / (g.median_us * 1e6) / wmma,
                      apart.c_str(), static_cast<unsigned long long>(got), got == digest ? "" : " MISMATCH");
        }
      }
      std::fflush(stdout);
    }
  }
  if (prefill_only) return failures;
  std::printf("\n## The block after the router with the gated shared expert (Is = I), one token\n\nµs per call in a "
              "CUDA graph of 40; weights GB/s of the two decode kernels (routed and shared) and their share of the "
              "stream read; their largest gap from the six kernels, relative to the largest output.\n\n"
              "| TP | six kernels (SiLU·up, shared GEMV, routed with the shared add) | two decode kernels | GB/s | gap |\n"
              "|---|---|---|---|---|\n");
  for (const std::string& r : shared_rows) std::printf("%s\n", r.c_str());
  std::printf("\n## DownCombineKernel alone, each instance (shared-expert warps, register cap), one token\n\n"
              "µs per call in a CUDA graph of 40, GB/s of routed and shared down weights; the largest gap from the "
              "launched instance, relative to the largest output.\n\n"
              "| TP | shared warps | register cap | µs | GB/s | gap |\n|---|---|---|---|---|---|\n");
  for (const std::string& r : combine_rows) std::printf("%s\n", r.c_str());
  failures += DecodeKernels(b);
  failures += Router(b);
  return failures;
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  const bool prefill_only = argc > 1 && std::strcmp(argv[1], "--prefill") == 0;
  return q38::bench::BenchMain("moe_bench", "done", [&](q38::bench::Bench& b) { return q38::Run(b, prefill_only); });
}
