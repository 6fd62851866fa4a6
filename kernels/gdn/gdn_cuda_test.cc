// Gated DeltaNet on the GPU against the reference over many calls (prefill chunks of several
// lengths, both kernels, then decode steps), the FP32 state compared after each, and the fused
// layer op (GdnMix); at the model's per-rank head counts for TP1, TP2 and TP4 and at the tiny
// geometry.
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
  // Below 32 tokens the recurrent kernel, from 32 the chunked one: exact, partial and several chunks.
  for (int64_t T : {9, 1, 1, 40, 1, 3, 31, 32, 100, 1}) {
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

// The fused layer op (GdnMix: one kernel for a token) against the CPU reference and against the
// GPU's own composition of four kernels, over prefill calls (which take the composition) and
// decode steps, with the conv history and the state carried across. The fused kernel rounds as
// the composition does, so on the GPU the two agree bitwise.
TEST_P(GdnCuda, MixMatchesReferenceAndComposition) {
  Q38_REQUIRE_GPU();
  const Geometry g = GetParam();
  constexpr int64_t K = 4;
  BackendPair b;
  Backend& gpu = b.gpu();
  const int64_t C = 2 * g.Hk * g.dk + g.Hv * g.dv, V = g.Hv * g.dv;
  std::vector<float> a_log = Normal(g.Hv, 1), dt_bias = Normal(g.Hv, 2), conv = Normal(C * K, 3),
                     norm = Normal(g.dv, 4);
  for (float& v : a_log) v = -1.0f + 0.5f * v;
  for (float& v : conv) v *= 0.5f;
  for (float& v : norm) v = 1.0f + 0.2f * v;
  auto alog = b.F32(a_log, {g.Hv}), dtb = b.F32(dt_bias, {g.Hv});
  auto cw = b.Act(conv, {C, K}), nw = b.Act(norm, {g.dv});
  auto conv_state = b.Act(std::vector<float>((K - 1) * C, 0.0f), {K - 1, C});
  auto state = b.F32(std::vector<float>(g.Hv * g.dk * g.dv, 0.0f), {g.Hv, g.dk, g.dv});
  // The GPU composition's own copies of the two states.
  Buffer conv_state2 = gpu.Upload(std::vector<float>((K - 1) * C, 0.0f), {K - 1, C});
  Buffer state2 = gpu.UploadF32(std::vector<float>(g.Hv * g.dk * g.dv, 0.0f), {g.Hv, g.dk, g.dv});
  for (bool sigmoid_gate : {false, true}) {
    const GdnMixWeights cpu_w{cw.cpu.t(), alog.cpu.t(), dtb.cpu.t(), nw.cpu.t(), g.Hk, g.dk, sigmoid_gate, 1e-6f};
    const GdnMixWeights gpu_w{cw.gpu.t(), alog.gpu.t(), dtb.gpu.t(), nw.gpu.t(), g.Hk, g.dk, sigmoid_gate, 1e-6f};
    uint32_t seed = sigmoid_gate ? 100 : 10;
    for (int64_t T : {9, 1, 1, 1, 2, 1, 1}) {
      auto qkv = b.Act(Normal(T * C, seed++), {T, C}), z = b.Act(Normal(T * V, seed++), {T, V});
      auto bb = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv}), aa = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv});
      auto y = b.Out({T, V});
      Buffer y2 = gpu.Alloc(DType::kF16, {T, V});
      b.cpu().GdnMix(qkv.cpu.t(), z.cpu.t(), bb.cpu.t(), aa.cpu.t(), cpu_w, conv_state.cpu.t(), state.cpu.t(),
                     y.cpu.t());
      gpu.GdnMix(qkv.gpu.t(), z.gpu.t(), bb.gpu.t(), aa.gpu.t(), gpu_w, conv_state.gpu.t(), state.gpu.t(), y.gpu.t());
      gpu.Backend::GdnMix(qkv.gpu.t(), z.gpu.t(), bb.gpu.t(), aa.gpu.t(), gpu_w, conv_state2.t(), state2.t(), y2.t());
      EXPECT_TRUE(b.Matches(y, 8)) << "y, T " << T;
      EXPECT_TRUE(b.Matches(state, 0.1)) << "state, T " << T;
      EXPECT_TRUE(b.Matches(conv_state, 1)) << "conv history, T " << T;
      auto host = [&](const Tensor& t) {
        std::vector<float> v(t.numel());
        gpu.CopyToHost(t, v.data());
        return v;
      };
      EXPECT_EQ(host(y.gpu.t()), host(y2.t())) << "fused y against the composition, T " << T;
      EXPECT_EQ(host(state.gpu.t()), host(state2.t())) << "fused state against the composition, T " << T;
      EXPECT_EQ(host(conv_state.gpu.t()), host(conv_state2.t())) << "fused conv history, T " << T;
    }
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
