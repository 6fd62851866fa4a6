// Gated DeltaNet on the GPU against the reference over many calls (prefill chunks of several
// lengths, both kernels, then decode steps), the FP32 state compared after each; at the model's per-rank head
// counts for TP1, TP2 and TP4 and at the tiny geometry.
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

struct Geometry {
  int64_t Hk, Hv, dk, dv;
};

class GdnCuda : public ::testing::TestWithParam<Geometry> {};

TEST_P(GdnCuda, ManyCallsMatchReference) {
  Q38_REQUIRE_GPU();
  const Geometry g = GetParam();
  BackendPair b;
  const int64_t width = 2 * g.Hk * g.dk + g.Hv * g.dv;
  std::vector<float> a_log = Normal(g.Hv, 1), dt_bias = Normal(g.Hv, 2);
  for (float& v : a_log) v = -1.0f + 0.5f * v;
  auto alog = b.F32(a_log, {g.Hv}), dtb = b.F32(dt_bias, {g.Hv});
  auto state = b.F32(std::vector<float>(g.Hv * g.dk * g.dv, 0.0f), {g.Hv, g.dk, g.dv});
  uint32_t seed = 10;
  // Below 32 tokens the recurrent kernel, from 32 the chunked one: exact, partial and several
  // chunks, and 300 tokens for the state carried through ten.
  for (int64_t T : {9, 1, 1, 40, 1, 3, 31, 32, 100, 300, 1}) {
    auto qkv = b.Act(Normal(T * width, seed++), {T, width});
    auto bb = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv}), aa = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv});
    auto beta = b.Out({T, g.Hv}, DType::kF32), gate = b.Out({T, g.Hv}, DType::kF32);
    b.cpu().GdnGates(bb.cpu.t(), aa.cpu.t(), alog.cpu.t(), dtb.cpu.t(), beta.cpu.t(), gate.cpu.t());
    b.gpu().GdnGates(bb.gpu.t(), aa.gpu.t(), alog.gpu.t(), dtb.gpu.t(), beta.gpu.t(), gate.gpu.t());
    EXPECT_TRUE(b.Matches(beta, 0.1)) << "beta, T " << T;
    EXPECT_TRUE(b.Matches(gate, 0.1)) << "g, T " << T;
    auto o = b.Out({T, g.Hv * g.dv});
    b.cpu().GdnDeltaRule(qkv.cpu.t(), beta.cpu.t(), gate.cpu.t(), state.cpu.t(), o.cpu.t(), g.Hk, g.dk, T > 1);
    b.gpu().GdnDeltaRule(qkv.gpu.t(), beta.gpu.t(), gate.gpu.t(), state.gpu.t(), o.gpu.t(), g.Hk, g.dk, T > 1);
    EXPECT_TRUE(b.Matches(o, 2)) << "o, T " << T;
    EXPECT_TRUE(b.Matches(state, 0.1)) << "state, T " << T;
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, GdnCuda,
                         ::testing::Values(Geometry{16, 48, 128, 128},  // TP1
                                           Geometry{8, 24, 128, 128},   // TP2
                                           Geometry{4, 12, 128, 128},   // TP4
                                           Geometry{4, 8, 64, 128},     // dk 64
                                           Geometry{4, 8, 16, 16},      // tiny: dv below one warp
                                           Geometry{2, 6, 32, 48}));    // dv not a multiple of 32

}  // namespace
}  // namespace q38
