// Gated DeltaNet on the GPU against the reference over many calls (prefill chunks of several
// lengths, both kernels, then decode steps), the FP32 state compared after each; at the model's per-rank head
// counts for TP1, TP2 and TP4 and at the tiny geometry; and the whole mixer of a GDN layer as one op.
#include <cmath>
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

INSTANTIATE_TEST_SUITE_P(Geometries, GdnCuda,
                         ::testing::Values(Geometry{16, 48, 128, 128},  // TP1
                                           Geometry{8, 24, 128, 128},   // TP2
                                           Geometry{4, 12, 128, 128},   // TP4
                                           Geometry{4, 8, 64, 128},     // dk 64
                                           Geometry{4, 8, 16, 16},      // tiny: dv below one warp
                                           Geometry{2, 6, 32, 48}));    // dv not a multiple of 32

// A GDN layer's whole mixer (Backend::GdnBlock: one kernel on the GPU at one token, GdnBlockGrid)
// against the CPU's composition over a prefill of 5 tokens (the composition on both sides) and
// decode steps with the residual update the block makes as it writes out, out, X and both states
// compared after each, at the model's TP1 and TP4 head counts,
// the small model's (with the sigmoid output gate and with silu) and dk 64. After the steps, one more step on the GPU three ways from the same
// states: eagerly, replayed from a recorded graph (one kernel; bitwise the same, states included) and through
// the GPU's own composition (within FP16 rounding).
struct GdnLayerShape {
  int64_t H, Hk, Hv, dk, dv;
  bool sigmoid_gate = true;
};

TEST(GdnBlockCuda, DecodeStepsMatchTheComposition) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  uint32_t seed = 100;
  for (const GdnLayerShape& g : {GdnLayerShape{2560, 16, 48, 128, 128}, GdnLayerShape{2560, 4, 12, 128, 128},
                                 GdnLayerShape{256, 4, 8, 32, 32}, GdnLayerShape{256, 4, 8, 32, 32, false},
                                 GdnLayerShape{512, 4, 8, 64, 128}}) {
    const std::string at = "H " + std::to_string(g.H) + " Hk " + std::to_string(g.Hk) + " Hv " + std::to_string(g.Hv) +
                           " dk " + std::to_string(g.dk) + " dv " + std::to_string(g.dv) +
                           (g.sigmoid_gate ? "" : " silu gate");
    const int64_t C = 2 * g.Hk * g.dk + g.Hv * g.dv, Z = g.Hv * g.dv, rows = C + Z + 2 * g.Hv, taps = 4;
    std::vector<float> in = Normal(rows * g.H, seed++), conv = Normal(C * taps, seed++), out_w = Normal(g.H * Z, seed++);
    for (float& v : in) v /= std::sqrt(static_cast<float>(g.H));
    for (float& v : conv) v *= 0.5f;
    for (float& v : out_w) v /= std::sqrt(static_cast<float>(Z));
    std::vector<float> a_log = Normal(g.Hv, seed++), dt_bias = Normal(g.Hv, seed++);
    for (float& v : a_log) v = -1.0f + 0.5f * v;
    auto w_in = b.Act(in, {rows, g.H}), w_conv = b.Act(conv, {C, taps}), w_out = b.Act(out_w, {g.H, Z});
    auto alog = b.F32(a_log, {g.Hv}), dtb = b.F32(dt_bias, {g.Hv});
    auto norm = b.Act(cpu::op_test::Uniform(g.dv, seed++, 0.5f, 1.5f), {g.dv});
    const Backend::GdnLayer cpu_w{w_in.cpu.t(), w_conv.cpu.t(), alog.cpu.t(), dtb.cpu.t(),    norm.cpu.t(),
                                  w_out.cpu.t(), g.Hk,          g.dk,         g.sigmoid_gate, 1e-6f};
    const Backend::GdnLayer gpu_w{w_in.gpu.t(), w_conv.gpu.t(), alog.gpu.t(), dtb.gpu.t(),    norm.gpu.t(),
                                  w_out.gpu.t(), g.Hk,          g.dk,         g.sigmoid_gate, 1e-6f};
    auto conv_state = b.Act(std::vector<float>((taps - 1) * C, 0.0f), {taps - 1, C});
    auto state = b.F32(std::vector<float>(g.Hv * g.dk * g.dv, 0.0f), {g.Hv, g.dk, g.dv});
    for (int64_t T : {5, 1, 1, 1}) {
      auto h = b.Act(Normal(T * g.H, seed++), {T, g.H});
      auto out = b.Out({T, g.H});
      // With the residual update of one rank: X [T, 4·H] += gains·out.
      auto X = b.F32(Normal(T * 4 * g.H, seed++), {T, 4 * g.H});
      auto gains = b.Act(Normal(T * 4, seed++), {T, 4});
      b.cpu().GdnBlock(h.cpu.t(), cpu_w, conv_state.cpu.t(), state.cpu.t(), out.cpu.t(), {&X.cpu.t(), &gains.cpu.t()});
      b.gpu().GdnBlock(h.gpu.t(), gpu_w, conv_state.gpu.t(), state.gpu.t(), out.gpu.t(), {&X.gpu.t(), &gains.gpu.t()});
      EXPECT_TRUE(b.Matches(out, 8)) << "out, T " << T << ", " << at;
      EXPECT_TRUE(b.Matches(X, 0.01)) << "the residual update, T " << T << ", " << at;
      EXPECT_TRUE(b.Matches(state, 1)) << "state, T " << T << ", " << at;
      EXPECT_TRUE(b.Matches(conv_state, 1)) << "conv state, T " << T << ", " << at;
    }

    // One more step three ways from the same states.
    Buffer conv0 = b.gpu().Alloc(DType::kF16, {taps - 1, C}), state0 = b.gpu().Alloc(DType::kF32, {g.Hv, g.dk, g.dv});
    b.gpu().Copy(conv_state.gpu.t(), conv0.t());
    b.gpu().Copy(state.gpu.t(), state0.t());
    const auto restore = [&] {
      b.gpu().Copy(conv0.t(), conv_state.gpu.t());
      b.gpu().Copy(state0.t(), state.gpu.t());
    };
    auto h = b.Act(Normal(g.H, seed++), {1, g.H});
    auto out = b.Out({1, g.H});
    b.gpu().GdnBlock(h.gpu.t(), gpu_w, conv_state.gpu.t(), state.gpu.t(), out.gpu.t(), {});
    const std::vector<float> eager = b.GpuFloats(out), eager_state = b.GpuFloats(state),
                             eager_conv = b.GpuFloats(conv_state);
    restore();
    auto graph = b.gpu().Capture([&]() -> absl::Status {
      b.gpu().GdnBlock(h.gpu.t(), gpu_w, conv_state.gpu.t(), state.gpu.t(), out.gpu.t(), {});
      return absl::OkStatus();
    });
    ASSERT_TRUE(graph.ok()) << at << ": " << graph.status();
    EXPECT_EQ(b.gpu().captured_kernels(), 1) << "the mixer as one kernel, " << at;
    b.gpu().Fill(out.gpu.t(), NAN);
    ASSERT_TRUE((*graph)->Replay().ok()) << at;
    EXPECT_EQ(b.GpuFloats(out), eager) << "replayed out, " << at;
    EXPECT_EQ(b.GpuFloats(state), eager_state) << "replayed state, " << at;
    EXPECT_EQ(b.GpuFloats(conv_state), eager_conv) << "replayed conv state, " << at;
    restore();
    b.gpu().Backend::GdnBlock(h.gpu.t(), gpu_w, conv_state.gpu.t(), state.gpu.t(), out.gpu.t(), {});
    const std::vector<float> composed = b.GpuFloats(out);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < g.H; ++i) {
      err += (static_cast<double>(eager[i]) - composed[i]) * (static_cast<double>(eager[i]) - composed[i]);
      ref += static_cast<double>(composed[i]) * composed[i];
    }
    EXPECT_LE(err / ref, 4 * cuda_test::kFp16Nmse) << "against the GPU composition, " << at;
  }
}

}  // namespace
}  // namespace q38
