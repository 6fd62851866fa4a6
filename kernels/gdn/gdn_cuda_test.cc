// Gated DeltaNet on the GPU against the reference over many calls (prefill chunks of several
// lengths, both kernels, then decode steps), the FP32 state compared after each; at the model's per-rank head
// counts for TP1, TP2 and TP4 and at the tiny geometry; and the whole mixer of a decode step in one
// kernel against its four.
#include <string>

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

// The whole mixer (Backend::GdnMixer: one kernel at T = 1) over calls of one token, then a few, then
// one again: against the CPU's composition of the four (the conv output rounded to FP16 as the GPU
// stores it), and bit for bit against the GPU's four kernels on their own
// copies of the conv history and the state (y, history and state after every call), so the
// arrival counters are seen to start each call at zero.
TEST_P(GdnCuda, MixerMatchesItsFourKernels) {
  Q38_REQUIRE_GPU();
  const Geometry g = GetParam();
  BackendPair b;
  const int64_t width = 2 * g.Hk * g.dk + g.Hv * g.dv, Dv = g.Hv * g.dv;
  std::vector<float> a_log = Normal(g.Hv, 1), dt_bias = Normal(g.Hv, 2), conv_w = Normal(width * 4, 3);
  for (float& v : a_log) v = -1.0f + 0.5f * v;
  for (float& v : conv_w) v *= 0.5f;
  auto alog = b.F32(a_log, {g.Hv}), dtb = b.F32(dt_bias, {g.Hv});
  auto cw = b.Act(conv_w, {width, 4});
  auto norm = b.Act(cpu::op_test::Uniform(g.dv, 4, 0.5f, 1.5f), {g.dv});
  const std::vector<float> zeros_state(g.Hv * g.dk * g.dv, 0.0f), zeros_hist(3 * width, 0.0f);
  auto state = b.F32(zeros_state, {g.Hv, g.dk, g.dv}), state4 = b.F32(zeros_state, {g.Hv, g.dk, g.dv});
  auto hist = b.Act(zeros_hist, {3, width}), hist4 = b.Act(zeros_hist, {3, width});
  uint32_t seed = 50;
  for (bool sigmoid_gate : {false, true}) {
    for (int64_t T : {1, 1, 1, 3, 1, 1}) {
      auto raw = b.Act(Normal(T * width, seed++), {T, width});
      auto z = b.Act(Normal(T * Dv, seed++), {T, Dv});
      auto bb = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv}), aa = b.Act(Normal(T * g.Hv, seed++), {T, g.Hv});
      const Backend::GdnMixerWeights weights{cw.gpu.t(), alog.gpu.t(), dtb.gpu.t(), norm.gpu.t(),
                                             g.Hk,       g.dk,         sigmoid_gate};
      auto y = b.Out({T, Dv}), y4 = b.Out({T, Dv});
      // The CPU reference: the mixer's composition with the conv output rounded to FP16 where the
      // GPU stores it, so the state meets ManyCallsMatchReference's bar from the same inputs.
      {
        Backend& c = b.cpu();
        Buffer xc = c.Alloc(DType::kF32, {T, width});
        c.CausalConv(raw.cpu.t(), cw.cpu.t(), hist.cpu.t(), xc.t(), /*dilation=*/1);
        std::vector<float> rounded(T * width);
        c.CopyToHost(xc.t(), rounded.data());
        rounded = cuda_test::RoundFp16(rounded);
        c.CopyFromHost(rounded.data(), xc.t());
        Buffer beta = c.Alloc(DType::kF32, {T, g.Hv}), gate = c.Alloc(DType::kF32, {T, g.Hv});
        c.GdnGates(bb.cpu.t(), aa.cpu.t(), alog.cpu.t(), dtb.cpu.t(), beta.t(), gate.t());
        Buffer o = c.Alloc(DType::kF32, {T, Dv});
        c.GdnDeltaRule(xc.t(), beta.t(), gate.t(), state.cpu.t(), o.t(), g.Hk, g.dk, T > 1);
        c.GatedRmsNorm(o.t(), z.cpu.t(), norm.cpu.t(), y.cpu.t(), sigmoid_gate, 1e-6f);
      }
      b.gpu().GdnMixer(raw.gpu.t(), z.gpu.t(), bb.gpu.t(), aa.gpu.t(), weights, hist.gpu.t(), state.gpu.t(),
                       y.gpu.t(), 1e-6f);
      b.gpu().Backend::GdnMixer(raw.gpu.t(), z.gpu.t(), bb.gpu.t(), aa.gpu.t(), weights, hist4.gpu.t(),
                                state4.gpu.t(), y4.gpu.t(), 1e-6f);
      const std::string at = "T " + std::to_string(T) + (sigmoid_gate ? " sigmoid gate" : " silu gate");
      EXPECT_TRUE(b.Matches(y, 4)) << "y against the CPU, " << at;
      EXPECT_TRUE(b.Matches(state, 0.1)) << "state against the CPU, " << at;
      EXPECT_EQ(b.GpuFloats(y), b.GpuFloats(y4)) << "y against the four kernels, " << at;
      EXPECT_EQ(b.GpuFloats(hist), b.GpuFloats(hist4)) << "conv history against the four kernels, " << at;
      EXPECT_EQ(b.GpuFloats(state), b.GpuFloats(state4)) << "state against the four kernels, " << at;
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
