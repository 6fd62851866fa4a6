// Hyper-connection steps on the GPU against the reference at the model's width (S = 4 streams
// of H = 2560, R = 320) and a small one; the streams X are FP32 on both sides.
#include <random>

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

}  // namespace
}  // namespace q38
