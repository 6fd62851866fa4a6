// MoE on the GPU against the reference: router top-k (indices exact, ties to the lower id), the
// routed experts with NVFP4 weights dequantized in the kernel and with dense weights, at the
// model's H and I with fewer experts, and at small awkward sizes, alone and with the gated shared
// expert added in the same kernel (ExpertsAndShared); the whole block of one token in one kernel
// (MoeBlock); the shared expert's helpers.
#include <random>

#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;
using cuda_test::RoundFp16;

TEST(MoeCuda, RouterPicksTheSameExperts) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  // T not a multiple of the kernel's 4 tokens per block; k above a warp's 32 lanes.
  for (auto [T, E, k] : {std::tuple<int64_t, int64_t, int64_t>{5, 512, 10}, {3, 32, 4}, {2, 300, 7}, {6, 100, 40}}) {
    std::vector<float> logits = Normal(T * E, 1);
    for (int64_t e = 0; e < 6; ++e) logits[e] = logits[E + e] = 1.5f;  // ties in rows 0 and 1
    auto l = b.Act(logits, {T, E});
    auto idx = b.Out({T, k}, DType::kI32);
    auto w = b.Out({T, k});
    b.cpu().RouterTopK(l.cpu.t(), idx.cpu.t(), w.cpu.t());
    b.gpu().RouterTopK(l.gpu.t(), idx.gpu.t(), w.gpu.t());
    EXPECT_EQ(b.GpuInts(idx), b.CpuInts(idx)) << "E " << E;
    EXPECT_TRUE(b.Matches(w)) << "E " << E;
  }
}

// Random NVFP4 experts: codes uniform, block scales E4M3 within [0.25, 4), small globals.
struct RandomNvfp4 {
  std::vector<uint8_t> codes, scales;
  std::vector<float> ga, gb;
  RandomNvfp4(int64_t E, int64_t N, int64_t K, uint32_t seed) : codes(E * N * K / 2), scales(E * N * K / 16), ga(E), gb(E) {
    std::mt19937 rng(seed);
    for (auto& c : codes) c = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(0x28 + rng() % 0x20);
    for (int64_t e = 0; e < E; ++e) {
      ga[e] = 0.002f * (1 + e % 3);
      gb[e] = 0.003f;
    }
  }
};

void ExpectSameExperts(BackendPair& b, int64_t T, int64_t E, int64_t k, int64_t H, int64_t I, bool nvfp4) {
  auto h = b.Act(Normal(T * H, 2), {T, H});
  std::vector<int32_t> idx_host(T * k);
  std::mt19937 rng(3);
  for (auto& e : idx_host) e = static_cast<int32_t>(rng() % E);
  auto idx = b.Raw(idx_host.data(), DType::kI32, {T, k});
  std::vector<float> w_host(T * k);
  for (auto& v : w_host) v = 0.05f + (rng() % 100) / 100.0f;
  auto w = b.Act(w_host, {T, k});
  ExpertWeights cpu_e, gpu_e;
  cpu_e.intermediate = gpu_e.intermediate = I;
  cpu_e.nvfp4 = gpu_e.nvfp4 = nvfp4;
  cuda_test::Twin gu_c, gu_s, dn_c, dn_s, g_gate, g_up, g_down, gu_d, dn_d;
  if (nvfp4) {
    const RandomNvfp4 gu(E, 2 * I, H, 4), dn(E, H, I, 5);
    gu_c = b.Raw(gu.codes.data(), DType::kU8, {E, 2 * I, H / 2});
    gu_s = b.Raw(gu.scales.data(), DType::kU8, {E, 2 * I, H / 16});
    dn_c = b.Raw(dn.codes.data(), DType::kU8, {E, H, I / 2});
    dn_s = b.Raw(dn.scales.data(), DType::kU8, {E, H, I / 16});
    g_gate = b.F32(gu.ga, {E});
    g_up = b.F32(gu.gb, {E});
    g_down = b.F32(dn.ga, {E});
    cpu_e.q = {gu_c.cpu, gu_s.cpu, dn_c.cpu, dn_s.cpu, g_gate.cpu, g_up.cpu, g_down.cpu};
    gpu_e.q = {gu_c.gpu, gu_s.gpu, dn_c.gpu, dn_s.gpu, g_gate.gpu, g_up.gpu, g_down.gpu};
  } else {
    std::vector<float> a = Normal(E * 2 * I * H, 6), c = Normal(E * H * I, 7);
    for (float& v : a) v *= 0.03f;
    for (float& v : c) v *= 0.03f;
    gu_d = b.Act(a, {E, 2 * I, H});
    dn_d = b.Act(c, {E, H, I});
    cpu_e.dense = {gu_d.cpu, dn_d.cpu};
    gpu_e.dense = {gu_d.gpu, dn_d.gpu};
  }
  auto out = b.Out({T, H});
  b.cpu().RoutedExperts(h.cpu.t(), idx.cpu.t(), w.cpu.t(), cpu_e, out.cpu.t());
  b.gpu().RoutedExperts(h.gpu.t(), idx.gpu.t(), w.gpu.t(), gpu_e, out.gpu.t());
  // The FP16 intermediate (silu(gate)·up) adds one rounding on the way.
  EXPECT_TRUE(b.Matches(out, 4)) << (nvfp4 ? "nvfp4" : "dense") << " T " << T << " H " << H << " I " << I;

  // With the gated shared expert: against the reference, and bitwise against the GPU's composition.
  auto shared = b.Act(Normal(T * H, 12), {T, H});
  auto gate = b.Act(Normal(T, 13), {T, 1});
  auto fused = b.Out({T, H});
  b.cpu().ExpertsAndShared(h.cpu.t(), idx.cpu.t(), w.cpu.t(), cpu_e, shared.cpu.t(), gate.cpu.t(), fused.cpu.t());
  b.gpu().ExpertsAndShared(h.gpu.t(), idx.gpu.t(), w.gpu.t(), gpu_e, shared.gpu.t(), gate.gpu.t(), fused.gpu.t());
  EXPECT_TRUE(b.Matches(fused, 4)) << "with the shared expert, T " << T;
  b.gpu().AddSigmoidGated(out.gpu.t(), shared.gpu.t(), gate.gpu.t());
  EXPECT_EQ(b.GpuFloats(fused), b.GpuFloats(out)) << "fused against RoutedExperts + AddSigmoidGated, T " << T;
}

TEST(MoeCuda, Nvfp4ExpertsAtModelWidth) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  // The chunked down kernel at 4, 2, 1 and 16 lanes a row (K = 640, 320, 160, 2048).
  ExpectSameExperts(b, 1, 12, 10, 2560, 640, true);  // decode, TP1
  ExpectSameExperts(b, 2, 12, 10, 2560, 320, true);  // TP2 slice of I
  ExpectSameExperts(b, 3, 12, 10, 2560, 160, true);  // TP4 slice of I
  ExpectSameExperts(b, 1, 4, 2, 2048, 2048, true);   // 16 lanes a row, 2 rows a warp
  // Down's lane groups, where the chunks do not fit: K not a multiple of 32 (runs a lane loads at
  // once: gate/up 12 in batches of 8 and 4; down 5).
  ExpectSameExperts(b, 9, 5, 3, 48, 16, true);       // small and awkward
  ExpectSameExperts(b, 2, 4, 2, 6144, 1040, true);
  ExpectSameExperts(b, 1, 5, 3, 96, 48, true);
}

// Above kPairwiseMaxTokens the pairs are grouped by expert into WMMA tiles: several tiles per
// expert, experts without pairs, a partial last tile, and I or H not a multiple of the tile.
TEST(MoeCuda, GroupedNvfp4ExpertsForPrefill) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  ExpectSameExperts(b, 64, 64, 8, 2560, 640, true);    // prefill, TP1 width (some experts empty)
  ExpectSameExperts(b, 150, 12, 4, 2560, 160, true);   // TP4 slice, ~50 pairs per expert
  ExpectSameExperts(b, 300, 3, 3, 48, 16, true);       // 300 pairs per expert: five tiles, a partial one
  ExpectSameExperts(b, 9, 7, 2, 96, 48, true);         // just above the pairwise route
}

TEST(MoeCuda, GroupedDenseExpertsForPrefill) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  ExpectSameExperts(b, 70, 6, 4, 2560, 320, false);
  ExpectSameExperts(b, 33, 4, 2, 80, 112, false);
}

TEST(MoeCuda, DenseExperts) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  ExpectSameExperts(b, 2, 6, 4, 2560, 320, false);
  ExpectSameExperts(b, 5, 4, 2, 64, 32, false);
}

// The whole MoE block of one token (Backend::MoeBlock: one kernel on the GPU, MoeBlockGrid)
// against the CPU's composition, at the model's H with fewer experts (TP1 and TP4 slices of I and
// Is), E = 512 with a small H, k = 16, the tiny model's shape, and one that takes every second
// pass of the kernel (more stacked rows than the grid has warps, H past a warp's loads of a row,
// more shared-down rows than a block takes at once, Is past a lane group's loads, 32 lanes a
// gate/up row). The router rows make logit e the value c_e, spaced 0.05 apart in a scrambled
// order, so that FP16 rounding cannot reorder the experts; the experts' globals grow as H and I
// shrink, so that the routed experts weigh in the output at every shape; each shape runs twice,
// the second time with the shared expert gated off (sigmoid(−12)), the output the routed experts'
// alone. On the GPU it is also one kernel in a recorded graph, within FP16 rounding of the GPU's
// own composition, the same on a second run and from the graph replayed after h changes and
// changes back; with a routing hook (which the fused kernel cannot call) the composition,
// honouring what the hook rewrites; and with the residual update made as out is written.
TEST(MoeCuda, MoeBlockOfOneToken) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [H, E, k, I, Is, routed_only] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>{2560, 64, 10, 640, 640, false},
        {2560, 64, 10, 640, 640, true}, {2560, 48, 10, 160, 160, false}, {256, 512, 10, 32, 32, false},
        {256, 512, 10, 32, 32, true}, {128, 40, 16, 96, 48, false}, {128, 40, 16, 96, 48, true},
        {64, 32, 4, 64, 64, false}, {5120, 64, 2, 64, 2048, false}, {5120, 64, 2, 64, 2048, true}}) {
    const std::string at = "H " + std::to_string(H) + " E " + std::to_string(E) + " k " + std::to_string(k) + " I " +
                           std::to_string(I) + " Is " + std::to_string(Is) + (routed_only ? " routed only" : "");
    const std::vector<float> h_values = RoundFp16(Normal(H, 41)), h_other = RoundFp16(Normal(H, 42));
    double hh = 0;
    for (float v : h_values) hh += static_cast<double>(v) * v;
    const int64_t rows = E + 2 * Is + 1;
    std::vector<float> in = Normal(rows * H, 43);
    for (int64_t e = 0; e < E; ++e) {
      const float c = 0.05f * static_cast<float>((e * 37 + 11) % E) - 0.025f * static_cast<float>(E);
      for (int64_t j = 0; j < H; ++j) in[e * H + j] = static_cast<float>(c * h_values[j] / hh);
    }
    for (int64_t r = E; r < rows; ++r) {
      for (int64_t j = 0; j < H; ++j) {
        in[r * H + j] = r == rows - 1 && routed_only ? static_cast<float>(-12.0f * h_values[j] / hh)
                                                     : in[r * H + j] / std::sqrt(static_cast<float>(H));
      }
    }
    std::vector<float> down = Normal(H * Is, 44);
    for (float& v : down) v /= std::sqrt(static_cast<float>(Is));
    auto h = b.Act(h_values, {1, H});
    auto w_in = b.Act(in, {rows, H});
    auto shared_down = b.Act(down, {H, Is});
    RandomNvfp4 gu(E, 2 * I, H, 45), dn(E, H, I, 46);
    for (float& g : gu.ga) g *= std::sqrt(2560.0f / static_cast<float>(H));
    for (float& g : gu.gb) g *= std::sqrt(2560.0f / static_cast<float>(H));
    for (float& g : dn.ga) g *= std::sqrt(640.0f / static_cast<float>(I));
    auto gu_c = b.Raw(gu.codes.data(), DType::kU8, {E, 2 * I, H / 2});
    auto gu_s = b.Raw(gu.scales.data(), DType::kU8, {E, 2 * I, H / 16});
    auto dn_c = b.Raw(dn.codes.data(), DType::kU8, {E, H, I / 2});
    auto dn_s = b.Raw(dn.scales.data(), DType::kU8, {E, H, I / 16});
    auto g_gate = b.F32(gu.ga, {E});
    auto g_up = b.F32(gu.gb, {E});
    auto g_down = b.F32(dn.ga, {E});
    ExpertWeights cpu_e, gpu_e;
    cpu_e.intermediate = gpu_e.intermediate = I;
    cpu_e.q = {gu_c.cpu, gu_s.cpu, dn_c.cpu, dn_s.cpu, g_gate.cpu, g_up.cpu, g_down.cpu};
    gpu_e.q = {gu_c.gpu, gu_s.gpu, dn_c.gpu, dn_s.gpu, g_gate.gpu, g_up.gpu, g_down.gpu};

    auto out = b.Out({1, H});
    b.cpu().MoeBlock(h.cpu.t(), w_in.cpu.t(), k, shared_down.cpu.t(), cpu_e, out.cpu.t(), nullptr, {});
    b.gpu().MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, out.gpu.t(), nullptr, {});
    EXPECT_TRUE(b.Matches(out, 8)) << "against the CPU, " << at;
    const std::vector<float> first = b.GpuFloats(out);

    auto composed = b.Out({1, H});
    b.gpu().Backend::MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, composed.gpu.t(), nullptr, {});
    const std::vector<float> c = b.GpuFloats(composed);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < H; ++i) {
      err += (static_cast<double>(first[i]) - c[i]) * (static_cast<double>(first[i]) - c[i]);
      ref += static_cast<double>(c[i]) * c[i];
    }
    EXPECT_LE(err / ref, 4 * cuda_test::kFp16Nmse) << "against the GPU composition, " << at;

    b.gpu().Fill(out.gpu.t(), NAN);
    b.gpu().MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, out.gpu.t(), nullptr, {});
    EXPECT_EQ(b.GpuFloats(out), first) << "again, " << at;
    auto graph = b.gpu().Capture([&]() -> absl::Status {
      b.gpu().MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, out.gpu.t(), nullptr, {});
      return absl::OkStatus();
    });
    ASSERT_TRUE(graph.ok()) << at << ": " << graph.status();
    EXPECT_EQ(b.gpu().captured_kernels(), 1) << "the block as one kernel, " << at;
    std::vector<uint16_t> bits(H);
    for (int64_t i = 0; i < H; ++i) bits[i] = FloatToFp16(h_other[i]);
    b.gpu().CopyFromHost(bits.data(), h.gpu.t());
    ASSERT_TRUE((*graph)->Replay().ok()) << at;
    EXPECT_NE(b.GpuFloats(out), first) << "the replay follows h, " << at;
    for (int64_t i = 0; i < H; ++i) bits[i] = FloatToFp16(h_values[i]);
    b.gpu().CopyFromHost(bits.data(), h.gpu.t());
    b.gpu().Fill(out.gpu.t(), NAN);
    ASSERT_TRUE((*graph)->Replay().ok()) << at;
    EXPECT_EQ(b.GpuFloats(out), first) << "replayed, " << at;

    // A hook that sends every choice to the last expert with equal weights.
    const auto last = [&](Backend& owner) -> Backend::RoutingHook {
      return [&owner, E, k](const Tensor&, Tensor& idx, Tensor& w) {
        const std::vector<int32_t> ids(k, static_cast<int32_t>(E - 1));
        owner.CopyFromHost(ids.data(), idx);
        const float weight = 1.0f / static_cast<float>(k);
        if (w.dtype == DType::kF16) {
          const std::vector<uint16_t> half(k, FloatToFp16(weight));
          owner.CopyFromHost(half.data(), w);
        } else {
          const std::vector<float> full(k, weight);
          owner.CopyFromHost(full.data(), w);
        }
      };
    };
    auto hooked = b.Out({1, H});
    b.cpu().MoeBlock(h.cpu.t(), w_in.cpu.t(), k, shared_down.cpu.t(), cpu_e, hooked.cpu.t(), last(b.cpu()), {});
    b.gpu().MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, hooked.gpu.t(), last(b.gpu()), {});
    EXPECT_TRUE(b.Matches(hooked, 8)) << "with a hook, " << at;
    EXPECT_NE(b.GpuFloats(hooked), first) << "the hook's choices, " << at;

    // With the residual update the block makes as it writes out (one rank): X [1, 4·H] += g·out.
    auto X = b.F32(Normal(4 * H, 47), {1, 4 * H});
    auto gains = b.Act(Normal(4, 48), {1, 4});
    auto updated = b.Out({1, H});
    b.cpu().MoeBlock(h.cpu.t(), w_in.cpu.t(), k, shared_down.cpu.t(), cpu_e, updated.cpu.t(), nullptr,
                     {&X.cpu.t(), &gains.cpu.t()});
    b.gpu().MoeBlock(h.gpu.t(), w_in.gpu.t(), k, shared_down.gpu.t(), gpu_e, updated.gpu.t(), nullptr,
                     {&X.gpu.t(), &gains.gpu.t()});
    EXPECT_EQ(b.GpuFloats(updated), first) << "out with the residual update, " << at;
    EXPECT_TRUE(b.Matches(X, 0.01)) << "the residual update, in FP32, " << at;
  }
}

TEST(MoeCuda, SiluMulAndSharedGate) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t T = 7, I = 640, H = 2560;
  auto gu = b.Act(Normal(T * 2 * I, 8), {T, 2 * I});
  auto y = b.Out({T, I});
  b.cpu().SiluMul(gu.cpu.t(), y.cpu.t());
  b.gpu().SiluMul(gu.gpu.t(), y.gpu.t());
  EXPECT_TRUE(b.Matches(y));
  auto out = b.Act(Normal(T * H, 9), {T, H});
  auto shared = b.Act(Normal(T * H, 10), {T, H});
  auto gate = b.Act(Normal(T, 11), {T, 1});
  b.cpu().AddSigmoidGated(out.cpu.t(), shared.cpu.t(), gate.cpu.t());
  b.gpu().AddSigmoidGated(out.gpu.t(), shared.gpu.t(), gate.gpu.t());
  EXPECT_TRUE(b.Matches(out));
}

}  // namespace
}  // namespace q38
