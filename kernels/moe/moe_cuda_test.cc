// MoE on the GPU against the reference: router top-k (indices exact, ties to the lower id), the
// routed experts with NVFP4 weights dequantized in the kernel and with dense weights, at the
// model's H and I with fewer experts, and at small awkward sizes, alone and with the gated shared
// expert added in the same kernel (ExpertsAndShared); every tile of the grouped route; the shared
// expert's helpers.
#include <random>

#include "kernels/moe/moe_cuda.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

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

  // Every tile of the grouped route, bitwise against the backend's (the tile changes no sum).
  if (T > cuda::kPairwiseMaxTokens) {
    const auto h16 = [](const cuda_test::Twin& t) { return static_cast<const __half*>(t.gpu.t().data); };
    const auto u8 = [](const cuda_test::Twin& t) { return static_cast<const uint8_t*>(t.gpu.t().data); };
    const auto f32 = [](const cuda_test::Twin& t) { return static_cast<const float*>(t.gpu.t().data); };
    cuda::ExpertProjection gu, dn;
    if (nvfp4) {
      gu = {u8(gu_c), u8(gu_s), f32(g_gate), f32(g_up), I, nullptr, 2 * I, H};
      dn = {u8(dn_c), u8(dn_s), f32(g_down), f32(g_down), H, nullptr, H, I};
    } else {
      gu = {nullptr, nullptr, nullptr, nullptr, 0, h16(gu_d), 2 * I, H};
      dn = {nullptr, nullptr, nullptr, nullptr, 0, h16(dn_d), H, I};
    }
    Buffer act = b.gpu().Alloc(DType::kF16, {T * k, I}), pair_out = b.gpu().Alloc(DType::kF32, {T * k, H});
    Buffer groups = b.gpu().Alloc(DType::kI32, {cuda::ExpertGroupsInts(T * k, E)});
    const cuda::ExpertScratch scratch{static_cast<__half*>(act.t().data), static_cast<float*>(pair_out.t().data),
                                      static_cast<int32_t*>(groups.t().data)};
    for (const cuda::GroupedTile tile : cuda::kGroupedTiles) {
      auto tiled = b.Out({T, H});
      cuda::RoutedExperts(h16(h), static_cast<const int32_t*>(idx.gpu.t().data), h16(w), gu, dn,
                          static_cast<__half*>(tiled.gpu.t().data), scratch, T, k, E, b.gpu().stream(), {}, tile);
      EXPECT_EQ(b.GpuFloats(tiled), b.GpuFloats(out)) << cuda::GroupedTileName(tile) << ", T " << T << " I " << I;
    }
  }

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
