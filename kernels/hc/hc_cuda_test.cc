// Hyper-connection steps on the GPU against the reference at the model's width (S = 4 streams
// of H = 2560, R = 320) and a small one; the streams X are FP32 on both sides.
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "kernels/hc/hc_cuda.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(HcCuda, EveryStep) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [T, S, H, R, V] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{3, 4, 2560, 320, 1000},
                               {5, 3, 40, 7, 50}}) {
    auto table = b.Act(Normal(V * H, 1), {V, H});
    std::vector<int32_t> ids_host(T);
    for (int64_t t = 0; t < T; ++t) ids_host[t] = static_cast<int32_t>((t * 37 + 5) % V);
    auto ids = b.Raw(ids_host.data(), DType::kI32, {T});
    auto X = b.Out({T, S * H}, DType::kF32);  // the residual streams are FP32
    b.cpu().EmbedStreams(table.cpu.t(), ids.cpu.t(), X.cpu.t(), S);
    b.gpu().EmbedStreams(table.gpu.t(), ids.gpu.t(), X.gpu.t(), S);
    EXPECT_TRUE(b.Matches(X, 0)) << "embed";

    for (bool inject : {true, false}) {
      const int64_t width = R + (inject ? S : 0);
      auto di = b.Act(Normal(T * width, 2), {T, width});
      auto a = b.Out({T, R});
      auto g = b.Out({T, S});
      b.cpu().HcGates(di.cpu.t(), a.cpu.t(), g.cpu.t(), S, inject);
      b.gpu().HcGates(di.gpu.t(), a.gpu.t(), g.gpu.t(), S, inject);
      EXPECT_TRUE(b.Matches(a)) << "gates a, inject " << inject;
      if (inject) {
        EXPECT_TRUE(b.Matches(g)) << "gates g";
      }
    }

    auto m = b.Act(Normal(T * S * H, 3), {T, S * H});
    auto xn = b.Act(Normal(T * S * H, 4), {T, S * H});
    auto h = b.Out({T, H});
    b.cpu().HcCombine(m.cpu.t(), xn.cpu.t(), h.cpu.t());
    b.gpu().HcCombine(m.gpu.t(), xn.gpu.t(), h.gpu.t());
    EXPECT_TRUE(b.Matches(h)) << "combine";

    auto g = b.Act(Normal(T * S, 5), {T, S});
    auto y = b.Act(Normal(T * H, 6), {T, H});
    b.cpu().HcResidual(X.cpu.t(), g.cpu.t(), y.cpu.t());
    b.gpu().HcResidual(X.gpu.t(), g.gpu.t(), y.gpu.t());
    EXPECT_TRUE(b.Matches(X, 0.01)) << "residual, in FP32";
  }
}

// The fused pre step (Backend::HcPre; two kernels at T = 1) against the CPU reference, and against
// the GPU's own composition of five kernels (Backend::HcPre, the base class's), at the model's
// widths (S = 4, H = 2560, R = 320), the small and tiny models' (H = 256 and 64, R = 16), with and
// without inject rows, norm weights of H and of S·H; T = 3 and R = 7 take the composition.
TEST(HcCuda, PreStepFusedAndComposed) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [T, S, H, R] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 4, 2560, 320}, {1, 4, 256, 16},
                            {1, 4, 64, 16}, {1, 2, 40, 8}, {3, 4, 2560, 320}, {1, 3, 40, 7}}) {
    for (bool inject : {true, false}) {
      for (bool norm_per_row : {true, false}) {
        const int64_t W = S * H, rows = R + (inject ? S : 0), norm_len = norm_per_row ? W : H;
        auto X = b.F32(Normal(T * W, 11), {T, W});
        auto norm = b.Act(cpu::op_test::Uniform(norm_len, 12, -0.3f, 0.3f), {norm_len});
        // di and m near unit scale, as the model's are.
        std::vector<float> down = Normal(rows * W, 13), up = Normal(W * R, 14);
        for (float& v : down) v /= std::sqrt(static_cast<float>(W));
        for (float& v : up) v *= 2.0f / std::sqrt(static_cast<float>(R));
        auto dw = b.Act(down, {rows, W});
        auto uw = b.Act(up, {W, R});
        auto h = b.Out({T, H}), g = b.Out({T, S});
        b.cpu().HcPre(X.cpu.t(), norm.cpu.t(), dw.cpu.t(), uw.cpu.t(), h.cpu.t(), g.cpu.t(), S, 1e-6f);
        b.gpu().HcPre(X.gpu.t(), norm.gpu.t(), dw.gpu.t(), uw.gpu.t(), h.gpu.t(), g.gpu.t(), S, 1e-6f);
        const std::string at = "T " + std::to_string(T) + " H " + std::to_string(H) + " R " + std::to_string(R) +
                               (inject ? " inject" : "") + (norm_per_row ? " norm per row" : "");
        // Rounded as the composition rounds: xn, di, a, m and h to FP16.
        EXPECT_TRUE(b.Matches(h, 8)) << "h against the CPU, " << at;
        if (inject) {
          EXPECT_TRUE(b.Matches(g, 8)) << "g against the CPU, " << at;
        }

        // The GPU's composition of five kernels on the same inputs.
        auto h5 = b.Out({T, H}), g5 = b.Out({T, S});
        b.gpu().Backend::HcPre(X.gpu.t(), norm.gpu.t(), dw.gpu.t(), uw.gpu.t(), h5.gpu.t(), g5.gpu.t(), S, 1e-6f);
        const std::vector<float> fused = b.GpuFloats(h), composed = b.GpuFloats(h5);
        double err = 0, ref = 0;
        for (size_t i = 0; i < fused.size(); ++i) {
          err += (static_cast<double>(fused[i]) - composed[i]) * (static_cast<double>(fused[i]) - composed[i]);
          ref += static_cast<double>(composed[i]) * composed[i];
        }
        EXPECT_LE(err / ref, 4 * cuda_test::kFp16Nmse) << "h against the GPU composition, " << at;
        if (inject) {
          const std::vector<float> gf = b.GpuFloats(g), gc = b.GpuFloats(g5);
          for (size_t i = 0; i < gf.size(); ++i) EXPECT_NEAR(gf[i], gc[i], 2e-3 * std::fabs(gc[i]) + 1e-3) << at;
        } else {
          const std::vector<float> gf = b.GpuFloats(g);
          for (float v : gf) EXPECT_TRUE(std::isnan(v)) << "g written without inject, " << at;
        }
      }
    }
  }
}

// Every configuration of the fused pair (cuda::HcPreConfig: 1, 2 or 4 rows of down_inject a block,
// 8 or 16 lanes a row of up) against the CPU reference, at the model's widths and at shapes whose
// H leaves threads of the first kernel without runs (H = 40, 64, 256, 512), takes several runs a
// thread with a partial last one (H = 2,600 and 3,072), or the most the kernel takes (H = 12,288:
// 6 runs a thread); N not a multiple of the rows a block; norm weights of S·H and of H. Each
// configuration's result is the same on a second run (a fixed order of sums), and the chosen one
// is what Backend::HcPre gives.
TEST(HcCuda, PreStepFusedEveryConfiguration) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const cudaStream_t stream = b.gpu().stream();
  int shape = 0;
  for (auto [S, H, R] : {std::tuple<int64_t, int64_t, int64_t>{4, 2560, 320}, {4, 256, 16}, {2, 40, 8}, {2, 2600, 24},
                         {4, 3072, 64}, {8, 64, 40}, {1, 512, 32}, {1, 12288, 32}}) {
    const bool norm_per_row = shape++ % 2 == 0;  // norm weights of S·H, or of H shared by the streams
    for (bool inject : {true, false}) {
      const int64_t W = S * H, rows = R + (inject ? S : 0), norm_len = norm_per_row ? W : H;
      auto X = b.F32(Normal(W, 21), {1, W});
      auto norm = b.Act(cpu::op_test::Uniform(norm_len, 22, -0.3f, 0.3f), {norm_len});
      std::vector<float> down = Normal(rows * W, 23), up = Normal(W * R, 24);
      for (float& v : down) v /= std::sqrt(static_cast<float>(W));
      for (float& v : up) v *= 2.0f / std::sqrt(static_cast<float>(R));
      auto dw = b.Act(down, {rows, W});
      auto uw = b.Act(up, {W, R});
      const std::string at = "S " + std::to_string(S) + " H " + std::to_string(H) + " R " + std::to_string(R) +
                             (inject ? " inject" : "");
      ASSERT_TRUE(cuda::HcPreFusedFits(S, H, R, norm_len, X.gpu.t().data, norm.gpu.t().data, dw.gpu.t().data,
                                       uw.gpu.t().data))
          << at;
      auto h = b.Out({1, H}), g = b.Out({1, S});
      b.cpu().HcPre(X.cpu.t(), norm.cpu.t(), dw.cpu.t(), uw.cpu.t(), h.cpu.t(), g.cpu.t(), S, 1e-6f);
      auto hb = b.Out({1, H}), gb = b.Out({1, S});
      b.gpu().HcPre(X.gpu.t(), norm.gpu.t(), dw.gpu.t(), uw.gpu.t(), hb.gpu.t(), gb.gpu.t(), S, 1e-6f);
      const std::vector<float> h_backend = b.GpuFloats(hb), g_backend = b.GpuFloats(gb);
      auto parts = b.Out({cuda::HcPreScratchFloats(S, R, inject)}, DType::kF32);
      auto rstd = b.Out({S}, DType::kF32);
      const cuda::HcPreConfig chosen = cuda::HcPreChoose(S, H, R);
      // 1, 2 or 4 rows a down block, 8 or 16 lanes an up row.
      for (int config = 0; config < 6; ++config) {
        const int down_rows = 1 << (config % 3), up_lanes = config / 3 ? 16 : 8;
        const cuda::HcPreConfig c{down_rows, up_lanes};
        const std::string with = at + " down_rows " + std::to_string(down_rows) + " up_lanes " +
                                 std::to_string(up_lanes);
        std::vector<float> first_h, first_g;
        for (int run = 0; run < 2; ++run) {
          b.gpu().Fill(h.gpu.t(), NAN);  // the CPU side holds the reference
          b.gpu().Fill(g.gpu.t(), NAN);
          cuda::HcPreFused(c, static_cast<float*>(X.gpu.t().data), static_cast<const __half*>(norm.gpu.t().data),
                           norm_len, static_cast<const __half*>(dw.gpu.t().data),
                           static_cast<const __half*>(uw.gpu.t().data), static_cast<__half*>(h.gpu.t().data),
                           inject ? static_cast<__half*>(g.gpu.t().data) : nullptr,
                           static_cast<float*>(parts.gpu.t().data), static_cast<float*>(rstd.gpu.t().data), S, H,
                           R, inject, 1e-6f, stream);
          ASSERT_EQ(cudaGetLastError(), cudaSuccess) << with;
          const std::vector<float> hg = b.GpuFloats(h), gg = b.GpuFloats(g);
          if (run == 0) {
            EXPECT_TRUE(b.Matches(h, 8)) << "h against the CPU, " << with;
            if (inject) {
              EXPECT_TRUE(b.Matches(g, 8)) << "g against the CPU, " << with;
            } else {
              for (float v : gg) EXPECT_TRUE(std::isnan(v)) << "g written without inject, " << with;
            }
            first_h = hg, first_g = gg;
            if (c.down_rows == chosen.down_rows && c.up_lanes == chosen.up_lanes) {
              for (int64_t i = 0; i < H; ++i) EXPECT_EQ(hg[i], h_backend[i]) << "h as HcPre's, " << with << " at " << i;
              if (inject) {
                for (int64_t i = 0; i < S; ++i) EXPECT_EQ(gg[i], g_backend[i]) << "g as HcPre's, " << with;
              }
            }
          } else {
            for (int64_t i = 0; i < H; ++i) EXPECT_EQ(hg[i], first_h[i]) << "h again, " << with << " at " << i;
            if (inject) {
              for (int64_t i = 0; i < S; ++i) EXPECT_EQ(gg[i], first_g[i]) << "g again, " << with;
            }
          }
        }
      }
    }
  }
}

// The last residual made on the way (Backend::HcResidualPre; the two kernels at T = 1): against
// the CPU reference, and bitwise against the GPU's own HcResidual then HcPre (X, h and g), at the
// model's widths and the small ones, with and without inject rows; more tokens take the update
// inside the norm (HcResidualNorm), then the rest of the composition.
TEST(HcCuda, ResidualAndPreStepFused) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [T, S, H, R] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 4, 2560, 320}, {1, 4, 256, 16},
                            {1, 2, 40, 8}, {3, 4, 64, 16}, {37, 4, 2560, 320}}) {
    for (bool inject : {true, false}) {
      const int64_t W = S * H, rows = R + (inject ? S : 0);
      std::vector<float> down = Normal(rows * W, 33), up = Normal(W * R, 34);
      for (float& v : down) v /= std::sqrt(static_cast<float>(W));
      for (float& v : up) v *= 2.0f / std::sqrt(static_cast<float>(R));
      auto dw = b.Act(down, {rows, W});
      auto uw = b.Act(up, {W, R});
      auto norm = b.Act(cpu::op_test::Uniform(H, 32, -0.3f, 0.3f), {H});
      auto g_last = b.Act(Normal(T * S, 35), {T, S});
      auto y = b.Act(Normal(T * H, 36), {T, H});
      const std::string at = "T " + std::to_string(T) + " H " + std::to_string(H) + " R " + std::to_string(R) +
                             (inject ? " inject" : "");
      auto X = b.F32(Normal(T * W, 31), {T, W});
      auto h = b.Out({T, H}), g = b.Out({T, S});
      b.cpu().HcResidualPre(X.cpu.t(), g_last.cpu.t(), y.cpu.t(), norm.cpu.t(), dw.cpu.t(), uw.cpu.t(), h.cpu.t(),
                            g.cpu.t(), S, 1e-6f);
      b.gpu().HcResidualPre(X.gpu.t(), g_last.gpu.t(), y.gpu.t(), norm.gpu.t(), dw.gpu.t(), uw.gpu.t(), h.gpu.t(),
                            g.gpu.t(), S, 1e-6f);
      EXPECT_TRUE(b.Matches(X, 0.01)) << "X against the CPU, " << at;
      EXPECT_TRUE(b.Matches(h, 8)) << "h against the CPU, " << at;
      if (inject) {
        EXPECT_TRUE(b.Matches(g, 8)) << "g against the CPU, " << at;
      }

      auto X2 = b.F32(Normal(T * W, 31), {T, W});
      auto h2 = b.Out({T, H}), g2 = b.Out({T, S});
      b.gpu().HcResidual(X2.gpu.t(), g_last.gpu.t(), y.gpu.t());
      b.gpu().HcPre(X2.gpu.t(), norm.gpu.t(), dw.gpu.t(), uw.gpu.t(), h2.gpu.t(), g2.gpu.t(), S, 1e-6f);
      EXPECT_EQ(b.GpuFloats(X), b.GpuFloats(X2)) << "X against HcResidual, " << at;
      EXPECT_EQ(b.GpuFloats(h), b.GpuFloats(h2)) << "h against HcResidual then HcPre, " << at;
      if (inject) {
        EXPECT_EQ(b.GpuFloats(g), b.GpuFloats(g2)) << "g against HcResidual then HcPre, " << at;
      }
    }
  }
}

// The residual update inside the norm (Backend::HcResidualNorm: one kernel) against the GPU's
// HcResidual then RmsNorm, bit for bit (X and xn), and against the CPU: norm weights of H and of
// S·H, rows of H whose last thread step is partial (H = 2,600: 1.27 steps of 256 threads) or
// leaves threads idle (H = 40), one token and many.
TEST(HcCuda, ResidualInsideTheNorm) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [T, S, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 4, 2560}, {300, 4, 2560}, {5, 2, 2600}, {9, 2, 40}}) {
    for (bool norm_per_row : {false, true}) {
      const int64_t W = S * H, norm_len = norm_per_row ? W : H;
      const std::string at = "T " + std::to_string(T) + " S " + std::to_string(S) + " H " + std::to_string(H) +
                             (norm_per_row ? " norm per stream" : "");
      auto norm = b.Act(cpu::op_test::Uniform(norm_len, 41, -0.3f, 0.3f), {norm_len});
      auto g_last = b.Act(Normal(T * S, 42), {T, S});
      auto y = b.Act(Normal(T * H, 43), {T, H});
      auto X = b.F32(Normal(T * W, 44), {T, W}), X2 = b.F32(Normal(T * W, 44), {T, W});
      auto xn = b.Out({T, W}), xn2 = b.Out({T, W});
      b.cpu().HcResidualNorm(X.cpu.t(), g_last.cpu.t(), y.cpu.t(), norm.cpu.t(), xn.cpu.t(), 1e-6f);
      b.gpu().HcResidualNorm(X.gpu.t(), g_last.gpu.t(), y.gpu.t(), norm.gpu.t(), xn.gpu.t(), 1e-6f);
      EXPECT_TRUE(b.Matches(X, 0.01)) << "X against the CPU, " << at;
      EXPECT_TRUE(b.Matches(xn, 2)) << "xn against the CPU, " << at;
      b.gpu().HcResidual(X2.gpu.t(), g_last.gpu.t(), y.gpu.t());
      b.gpu().RmsNorm(X2.gpu.t(), norm.gpu.t(), xn2.gpu.t(), H, /*zero_centred=*/true, 1e-6f);
      EXPECT_EQ(b.GpuFloats(X), b.GpuFloats(X2)) << "X against HcResidual, " << at;
      EXPECT_EQ(b.GpuFloats(xn), b.GpuFloats(xn2)) << "xn against HcResidual then RmsNorm, " << at;
    }
  }
}

}  // namespace
}  // namespace q38
