// The causal conv with carried FP16 history against the reference, over many calls: prefill
// chunks of several sizes (within one token tile, a whole one, three with a partial last)
// between single decode steps, for the GDN (dilation 1, 8 channels a thread where they divide)
// and PLE (dilation 3) shapes.
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(ConvCuda, StateCarriesAcrossCalls) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  // 4 taps at dilation 1 with C a multiple of 8 take the kernel that keeps its rows in registers.
  for (auto [C, dilation] : {std::pair<int64_t, int64_t>{10240, 1}, {1000, 1}, {36, 1}, {600, 3}, {33, 2}}) {
    const int64_t K = 4, hist = (K - 1) * dilation;
    auto w = b.Act(Normal(C * K, 12), {C, K});
    auto state = b.Act(std::vector<float>(hist * C, 0.0f), {hist, C});
    uint32_t seed = 100;
    for (int64_t T : {5, 1, 130, 1, 17, 64, 1, 2}) {
      auto x = b.Act(Normal(T * C, seed++), {T, C});
      auto y = b.Out({T, C});
      b.cpu().CausalConv(x.cpu.t(), w.cpu.t(), state.cpu.t(), y.cpu.t(), dilation);
      b.gpu().CausalConv(x.gpu.t(), w.gpu.t(), state.gpu.t(), y.gpu.t(), dilation);
      EXPECT_TRUE(b.Matches(y)) << "C " << C << " T " << T;
      // The FP16 state holds the FP16 inputs exactly.
      EXPECT_TRUE(b.Matches(state, 0)) << "state, C " << C << " T " << T;
    }
  }
}

}  // namespace
}  // namespace q38
