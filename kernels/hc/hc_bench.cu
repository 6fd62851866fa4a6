// Lab bench of the hyper-connection pre step on one GPU (kernels/testing/bench_timing.h): at the
// full-size decode shapes (one token; S = 4, H = 2560, R = 320; a layer's module with inject rows
// and the final mixer's without) and the small model's, the composition of five kernels the model
// ran before (RmsNorm, down/inject GEMV, gates, up GEMV, combine), the previous fused pair
// (hc_pre_v1_bench.cuh) and the fused pair of now (cuda::HcPreFused, its chosen configuration);
// µs per pre step inside a CUDA graph of a batch of steps (as the decode graph replays them) and
// eagerly, weights cold in the L2 (a batch rotates among copies spanning 256 MB), X one buffer.
// Then each fused kernel alone beside the plain GEMV of its matrix (cuda::Linear), and every
// configuration of HcPreFused. The last residual update
// as its own kernel before the pair is timed against the pair that makes it on its way
// (HcLastResidual); at 8,192 tokens, the update and the norm after it against HcResidualNorm.
// Last, the embedding copied into the streams (EmbedStreams) at one token and 8,192.
// Every fused output is checked against the composed one (NMSE of h, largest gap of g); the exit
// status is 1 if any disagrees.
// Usage: hc_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/hc/hc_cuda.h"
#include "kernels/hc/hc_pre_v1_bench.cuh"
#include "kernels/linear/linear_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::Timing;
using bench::FillHalfKernel;
using bench::HashUnit;


using bench::DeviceArray;
using bench::ToHost;

// One module's operands: copies of its weights spanning 256 MB, X, scratch and outputs.
struct Module {
  int64_t S, H, R, rows, W;
  int copies;
  std::unique_ptr<DeviceArray<__half>> norm, down, up, xn, di, a, m, h, g, y, di2;
  std::unique_ptr<DeviceArray<float>> X, rstd, parts;
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
    parts = std::make_unique<DeviceArray<float>>(cuda::HcPreScratchFloats(S, R, inject));
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
    bench::FillFloatKernel<<<64, 256, 0, s>>>(X->p, W, 4, 4.0f);
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
  // The previous fused pair, whole and each kernel alone.
  void Old(int i, cudaStream_t s) {
    OldDown(i, s);
    OldUp(i, s);
  }
  void OldDown(int i, cudaStream_t s) {
    cuda::hc_v1::HcPreDown(X->p, norm->p, W, Down(i), di2->p, rstd->p, S, H, R, inject(), 1e-6f, s);
  }
  void OldUp(int i, cudaStream_t s) {
    cuda::hc_v1::HcPreUp(X->p, norm->p, W, Up(i), h->p, inject() ? g->p : nullptr, di2->p, rstd->p, S, H, R, inject(), s);
  }
  // The fused pair of now, whole and each kernel alone.
  void Fused(const cuda::HcPreConfig& c, int i, cudaStream_t s) {
    cuda::HcPreFused(c, X->p, norm->p, W, Down(i), Up(i), h->p, inject() ? g->p : nullptr, parts->p, rstd->p, S, H, R,
                     inject(), 1e-6f, s);
  }
  void FusedDown(const cuda::HcPreConfig& c, int i, cudaStream_t s) {
    cuda::HcPreFusedDown(c, X->p, norm->p, W, Down(i), parts->p, rstd->p, S, H, R, inject(),
                         1e-6f, s);
  }
  void FusedUp(const cuda::HcPreConfig& c, int i, cudaStream_t s) {
    cuda::HcPreFusedUp(c, X->p, norm->p, W, Up(i), parts->p, inject() ? g->p : nullptr, rstd->p, h->p, S, H, R, inject(),
                       s);
  }
};

struct Gap {
  double nmse = 0, g = 0;
  bool ok() const { return nmse <= 4e-6 && g <= 2e-3; }
};

// A prefill chunk's residual update and the norm that opens the next pre step (8,192 tokens, full
// size): HcResidual then RmsNorm against HcResidualNorm, which reads X once instead of twice.
// Each on its own copy of X; X and xn must agree bit for bit.
int ResidualNorm(Bench& b) {
  const cudaStream_t s = b.stream();
  const int64_t T = 8192, S = 4, H = 2560, W = S * H;
  DeviceArray<float> Xa(T * W), Xb(T * W);
  DeviceArray<__half> g(T * S), y(T * H), norm(H), xa(T * W), xb(T * W);
  bench::FillFloatKernel<<<1024, 256, 0, s>>>(Xa.p, T * W, 7, 4.0f);
  FillHalfKernel<<<64, 256, 0, s>>>(g.p, T * S, 8, 2.0f);
  FillHalfKernel<<<1024, 256, 0, s>>>(y.p, T * H, 9, 1.0f);
  FillHalfKernel<<<16, 256, 0, s>>>(norm.p, H, 10, 0.4f);
  Q38_CUDA_LAUNCHED();
  Q38_CUDA_CHECK(cudaMemcpyAsync(Xb.p, Xa.p, T * W * sizeof(float), cudaMemcpyDeviceToDevice, s));
  const bench::Launch apart = [&](int, cudaStream_t st) {
    cuda::HcResidual(Xa.p, g.p, y.p, T, S, H, st);
    cuda::RmsNorm(Xa.p, norm.p, xa.p, T, W, H, H, 1e-6f, /*zero_centred=*/true, st);
  };
  const bench::Launch together = [&](int, cudaStream_t st) {
    cuda::HcResidualNorm(Xb.p, g.p, y.p, norm.p, H, xb.p, T, S, H, 1e-6f, st);
  };
  apart(0, s);
  together(0, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const bool same = ToHost(Xa.p, T * W) == ToHost(Xb.p, T * W) && ToHost(xa.p, T * W) == ToHost(xb.p, T * W);
  const Timing ta = b.Eager(5, apart), tt = b.Eager(5, together);
  // The fused kernel's bytes: X read and written, y read, xn written.
  const double fused_bytes = T * W * (2 * 4.0 + 2.0) + T * H * 2.0;
  std::printf("\n## Residual update and norm, 8,192 tokens\n\nµs per call, eager (the values grow by g·y each "
              "call).\n\n| HcResidual + RmsNorm µs | HcResidualNorm µs | apart / together | fused GB/s | X and xn |\n"
              "|---|---|---|---|---|\n| %.1f | %.1f | %.2f× | %.0f | %s |\n",
              ta.median_us, tt.median_us, ta.median_us / tt.median_us, fused_bytes / (tt.median_us * 1e3),
              same ? "bitwise" : "MISMATCH");
  return same ? 0 : 1;
}

// The embedding copied into every stream (EmbedStreams), at one token and 8,192: each token's
// row of a 4,096-row table (the rows gathered cost the same whatever the vocabulary) as FP32 into
// its S = 4 streams; X checked bit for bit against the table.
int Embed(Bench& b) {
  const cudaStream_t s = b.stream();
  const int64_t kRows = 4096, S = 4, H = 2560, kMaxT = 8192;
  DeviceArray<__half> table(kRows * H);
  DeviceArray<int32_t> ids(kMaxT);
  DeviceArray<float> X(kMaxT * S * H);
  FillHalfKernel<<<1024, 256, 0, s>>>(table.p, kRows * H, 21, 2.0f);
  Q38_CUDA_LAUNCHED();
  std::vector<int32_t> host_ids(kMaxT);
  for (int64_t t = 0; t < kMaxT; ++t) host_ids[t] = static_cast<int32_t>((t * 2654435761u) % kRows);
  Q38_CUDA_CHECK(cudaMemcpyAsync(ids.p, host_ids.data(), kMaxT * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  std::printf("\n## Embedding into the streams\n\nµs per call in a CUDA graph of 40; bytes of the rows read and "
              "X written.\n\n| tokens | µs | GB/s | X |\n|---|---|---|---|\n");
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));  // the table is filled on the bench's non-blocking stream
  const std::vector<float> rows = ToHost(table.p, kRows * H);
  int failures = 0;
  for (int64_t T : {int64_t{1}, kMaxT}) {
    cuda::EmbedStreams(table.p, ids.p, X.p, T, S, H, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> got = ToHost(X.p, T * S * H);
    bool same = true;
    for (int64_t i = 0; i < T * S * H && same; ++i) same = got[i] == rows[host_ids[i / (S * H)] * H + i % H];
    failures += same ? 0 : 1;
    // One token rotates among the ids so that consecutive calls read other rows.
    const Timing t = b.Graph(40, [&](int i, cudaStream_t st) {
      cuda::EmbedStreams(table.p, ids.p + (T == 1 ? i % kMaxT : 0), X.p, T, S, H, st);
    });
    std::printf("| %lld | %.2f | %.0f | %s |\n", static_cast<long long>(T), t.median_us,
                T * H * (2.0 + 4.0 * S) / (t.median_us * 1e3), same ? "bitwise" : "MISMATCH");
  }
  return failures;
}

int Run(Bench& b) {
  int failures = 0;
  const cudaStream_t s = b.stream();
  std::printf("\n## Hyper-connection pre step, one token\n\n"
              "µs per pre step in a CUDA graph of a batch of 97 steps (eager in brackets); weights cold in the L2. "
              "old: the fused pair before (hc_pre_v1_bench.cuh); new: cuda::HcPreFused as chosen.\n\n");
  std::printf("| module | weights MB | composed: 5 kernels µs | old fused µs | new fused µs | old / new | new GB/s | "
              "h NMSE new vs composed | g max rel. gap |\n|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    const char* name;
    int64_t S, H, R;
    bool inject;
  };
  const Shape shapes[] = {Shape{"layer module (full size)", 4, 2560, 320, true},
                          Shape{"final mixer (full size)", 4, 2560, 320, false},
                          Shape{"layer module (small model)", 4, 256, 16, true}};
  const int iters = 97;  // the pre steps of one decode step
  std::vector<std::string> kernel_rows, sweep_rows;
  char line[512];
  for (const Shape& c : shapes) {
    Module m(c.S, c.H, c.R, c.inject, s);
    m.Composed(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> h0 = ToHost(m.h->p, c.H), g0 = ToHost(m.g->p, c.S);
    // Runs `launch` once on poisoned outputs and compares h and g with the composition's.
    auto check = [&](const char* what, const std::function<void()>& launch) {
      Q38_CUDA_CHECK(cudaMemsetAsync(m.h->p, 0xff, 2 * c.H, s));
      Q38_CUDA_CHECK(cudaMemsetAsync(m.g->p, 0xff, 2 * c.S, s));
      launch();
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      const std::vector<float> h1 = ToHost(m.h->p, c.H), g1 = ToHost(m.g->p, c.S);
      double err = 0, ref = 0, gap = 0;
      for (int64_t i = 0; i < c.H; ++i) {
        err += (static_cast<double>(h1[i]) - h0[i]) * (static_cast<double>(h1[i]) - h0[i]);
        ref += static_cast<double>(h0[i]) * h0[i];
      }
      if (c.inject)
        for (int64_t i = 0; i < c.S; ++i)
          gap = std::max(gap, std::isfinite(g1[i]) ? std::fabs(static_cast<double>(g1[i]) - g0[i]) / std::fabs(g0[i])
                                                   : INFINITY);
      Gap r{std::isfinite(err) ? err / std::max(ref, 1e-30) : INFINITY, gap};
      if (!r.ok()) {
        ++failures;
        std::printf("MISMATCH %s, %s: h NMSE %.2g, g gap %.2g\n", c.name, what, r.nmse, r.g);
      }
      return r;
    };
    const cuda::HcPreConfig chosen = cuda::HcPreChoose(c.S, c.H, c.R);
    check("old fused", [&] { m.Old(0, s); });
    const Gap gn = check("new fused", [&] { m.Fused(chosen, 0, s); });

    const bench::Launch composed = [&](int i, cudaStream_t st) { m.Composed(i, st); };
    const bench::Launch old = [&](int i, cudaStream_t st) { m.Old(i, st); };
    const bench::Launch fused = [&](int i, cudaStream_t st) { m.Fused(chosen, i, st); };
    const Timing tc = b.Graph(iters, composed), to = b.Graph(iters, old), tf = b.Graph(iters, fused);
    const Timing ec = b.Eager(iters, composed), eo = b.Eager(iters, old), ef = b.Eager(iters, fused);
    std::printf("| %s | %.1f | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %.2f× | %.0f | %.2g | %.2g |\n", c.name,
                m.WeightBytes() / 1e6, tc.median_us, ec.median_us, to.median_us, eo.median_us, tf.median_us,
                ef.median_us, to.median_us / tf.median_us, m.WeightBytes() / (tf.median_us * 1e3), gn.nmse, gn.g);
    if (c.inject && c.H == 2560) {
      // The last sub-block's residual update by its own kernel before the pre step, against the
      // pre step that makes it on its way (HcLastResidual), each on its own copy of X (the checks
      // above compare with h0, computed from X as it is): X and h must agree bit for bit.
      DeviceArray<float> Xa(m.W), Xb(m.W);
      DeviceArray<__half> g_last(c.S), hb(c.H);
      FillHalfKernel<<<1, 32, 0, s>>>(g_last.p, c.S, 6, 2.0f);
      Q38_CUDA_LAUNCHED();
      Q38_CUDA_CHECK(cudaMemcpyAsync(Xa.p, m.X->p, m.W * sizeof(float), cudaMemcpyDeviceToDevice, s));
      Q38_CUDA_CHECK(cudaMemcpyAsync(Xb.p, m.X->p, m.W * sizeof(float), cudaMemcpyDeviceToDevice, s));
      const cuda::HcLastResidual last{g_last.p, m.y->p};
      const bench::Launch apart = [&](int i, cudaStream_t st) {
        cuda::HcResidual(Xa.p, g_last.p, m.y->p, 1, c.S, c.H, st);
        cuda::HcPreFused(chosen, Xa.p, m.norm->p, m.W, m.Down(i), m.Up(i), m.h->p, m.g->p, m.parts->p, m.rstd->p, c.S,
                         c.H, c.R, true, 1e-6f, st);
      };
      const bench::Launch together = [&](int i, cudaStream_t st) {
        cuda::HcPreFused(chosen, Xb.p, m.norm->p, m.W, m.Down(i), m.Up(i), hb.p, m.g->p, m.parts->p, m.rstd->p, c.S, c.H,
                         c.R, true, 1e-6f, st, last);
      };
      apart(0, s);
      together(0, s);
      Q38_CUDA_CHECK(cudaStreamSynchronize(s));
      const bool same = ToHost(Xa.p, m.W) == ToHost(Xb.p, m.W) && ToHost(m.h->p, c.H) == ToHost(hb.p, c.H);
      failures += same ? 0 : 1;
      const Timing ta = b.Graph(iters, apart), tt = b.Graph(iters, together);
      std::printf("| residual update, then the pre step: HcResidual + new fused µs, against the pair that makes the "
                  "update (HcLastResidual) | | %.2f | | %.2f | %.2f× | | %s | |\n",
                  ta.median_us, tt.median_us, ta.median_us / tt.median_us, same ? "X and h bitwise" : "MISMATCH");
    }
    std::fflush(stdout);

    // Each kernel alone (the up kernels read what their down kernels left), and the plain GEMVs.
    m.Old(0, s);
    const Timing od = b.Graph(iters, [&](int i, cudaStream_t st) { m.OldDown(i, st); });
    const Timing ou = b.Graph(iters, [&](int i, cudaStream_t st) { m.OldUp(i, st); });
    m.Fused(chosen, 0, s);
    const Timing nd = b.Graph(iters, [&](int i, cudaStream_t st) { m.FusedDown(chosen, i, st); });
    const Timing nu = b.Graph(iters, [&](int i, cudaStream_t st) { m.FusedUp(chosen, i, st); });
    const Timing gd = b.Graph(iters, [&](int i, cudaStream_t st) { cuda::Linear(m.xn->p, m.Down(i), m.di->p, 1, m.W, m.rows, st); });
    const Timing gu = b.Graph(iters, [&](int i, cudaStream_t st) { cuda::Linear(m.a->p, m.Up(i), m.m->p, 1, c.R, m.W, st); });
    std::snprintf(line, sizeof line, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |", c.name, od.median_us,
                  nd.median_us, gd.median_us, ou.median_us, nu.median_us, gu.median_us);
    kernel_rows.emplace_back(line);

    // Every configuration.
    for (int rows : {1, 2, 4}) {
      for (int lanes : {8, 16}) {
        const cuda::HcPreConfig k{rows, lanes};
        char what[64];
        std::snprintf(what, sizeof what, "down_rows %d up_lanes %d", rows, lanes);
        const Gap gk = check(what, [&] { m.Fused(k, 0, s); });
        const Timing tk = b.Graph(iters, [&](int i, cudaStream_t st) { m.Fused(k, i, st); });
        m.Fused(k, 0, s);  // the up kernel alone reads what this configuration's down kernel left
        const Timing dk = b.Graph(iters, [&](int i, cudaStream_t st) { m.FusedDown(k, i, st); });
        const Timing uk = b.Graph(iters, [&](int i, cudaStream_t st) { m.FusedUp(k, i, st); });
        std::snprintf(line, sizeof line, "| %s | %d | %d | %.2f | %.2f | %.2f | %.2g |%s", c.name, rows, lanes,
                      tk.median_us, dk.median_us, uk.median_us, gk.nmse,
                      rows == chosen.down_rows && lanes == chosen.up_lanes ? " chosen" : "");
        sweep_rows.emplace_back(line);
      }
    }
  }
  std::printf("\n### Each kernel alone\n\nµs per call in a CUDA graph of 97; the plain GEMV is cuda::Linear on the same "
              "matrix (down/inject [R + S, S·H], up [S·H, R]).\n\n"
              "| module | old down | new down | GEMV down | old up | new up | GEMV up |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& r : kernel_rows) std::printf("%s\n", r.c_str());
  std::printf("\n### Every configuration of HcPreFused\n\nµs per call in a CUDA graph of 97.\n\n"
              "| module | down rows | up lanes | fused | down alone | up alone | h NMSE vs composed |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const std::string& r : sweep_rows) std::printf("%s\n", r.c_str());
  return failures + ResidualNorm(b) + Embed(b);
}

}  // namespace
}  // namespace q38

int main() { return q38::bench::BenchMain("hc_bench", "fused matches composed", q38::Run); }
