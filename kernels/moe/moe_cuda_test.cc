// MoE on the GPU against the reference: router top-k (indices exact, ties to the lower id), the
// routed experts with NVFP4 weights dequantized in the kernel and with dense weights, at the
// model's H and I with fewer experts, and at small awkward sizes, alone and with the gated shared
// expert added in the same kernel or, at decode, the whole block after the router in two
// (ExpertsAndShared); every tile of the grouped route; the shared expert's helpers.
#include <random>
#include <string>
#include <utility>

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

  // Every tile of the grouped route, bitwise against the backend's (the tile changes no sum).
  if (T > cuda::kPairwiseMaxTokens) {
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

  // With the gated shared expert (Backend::ExpertsAndShared, from its gate/up output): against the
  // reference, and against the GPU's composition (SiluMul, Linear, RoutedExperts,
  // AddSigmoidGated): bitwise where the backend runs that composition with the add in the sum's
  // kernel, within FP16 noise where the two decode kernels take the block (the shared expert's dot
  // products add in their own order there).
  for (const int64_t Is : {I, 3 * I}) {
    auto shared_gu = b.Act(Normal(T * 2 * Is, 12), {T, 2 * Is});
    std::vector<float> sd = Normal(H * Is, 14);
    for (float& v : sd) v *= 0.03f;
    auto shared_down = b.Act(sd, {H, Is});
    auto gate = b.Act(Normal(T, 13), {T, 1});
    auto fused = b.Out({T, H});
    b.cpu().ExpertsAndShared(h.cpu.t(), idx.cpu.t(), w.cpu.t(), cpu_e, shared_gu.cpu.t(), shared_down.cpu.t(),
                             gate.cpu.t(), fused.cpu.t());
    b.gpu().ExpertsAndShared(h.gpu.t(), idx.gpu.t(), w.gpu.t(), gpu_e, shared_gu.gpu.t(), shared_down.gpu.t(),
                             gate.gpu.t(), fused.gpu.t());
    const std::string at = std::string(nvfp4 ? "nvfp4" : "dense") + " T " + std::to_string(T) + " k " +
                           std::to_string(k) + " I " + std::to_string(I) + " Is " + std::to_string(Is);
    EXPECT_TRUE(b.Matches(fused, 4)) << "with the shared expert, " << at;
    auto composed = b.Out({T, H});
    b.gpu().Backend::ExpertsAndShared(h.gpu.t(), idx.gpu.t(), w.gpu.t(), gpu_e, shared_gu.gpu.t(), shared_down.gpu.t(),
                                      gate.gpu.t(), composed.gpu.t());
    const cuda::SharedExpert shared{h16(shared_gu), h16(shared_down), Is, h16(gate), 1};
    const std::vector<float> f = b.GpuFloats(fused), c = b.GpuFloats(composed);
    if (!cuda::ExpertsAndSharedDecodeFits(gu, dn, T, k, shared)) {
      EXPECT_EQ(f, c) << "against the composition, " << at;
      continue;
    }
    double err = 0, ref = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      err += (static_cast<double>(f[i]) - c[i]) * (static_cast<double>(f[i]) - c[i]);
      ref += static_cast<double>(c[i]) * c[i];
    }
    EXPECT_LE(err / ref, cuda_test::kFp16Nmse) << "the decode kernels against the composition, " << at;
    auto again = b.Out({T, H});
    b.gpu().ExpertsAndShared(h.gpu.t(), idx.gpu.t(), w.gpu.t(), gpu_e, shared_gu.gpu.t(), shared_down.gpu.t(),
                             gate.gpu.t(), again.gpu.t());
    EXPECT_EQ(b.GpuFloats(again), f) << "the decode kernels again, " << at;
  }
}

// The two decode kernels take the model's MoE block at TP1, TP2 and TP4 (I = 640, 320, 160 with
// k = 10: 4, 2 and 1 lanes a row) and the tiny model's (I = 64, k = 4); not prefill, I past 8
// lanes a row, nor dense experts. Only shapes and alignment are asked: no GPU needed.
TEST(MoeCuda, DecodeKernelsTakeTheModelsShapes) {
  alignas(16) static uint8_t storage[64];
  const uint8_t* p = storage;
  const auto* f = reinterpret_cast<const float*>(storage);
  const auto* x = reinterpret_cast<const __half*>(storage);
  const auto projections = [&](int64_t H, int64_t I) {
    return std::pair<cuda::ExpertProjection, cuda::ExpertProjection>{{p, p, f, f, I, nullptr, 2 * I, H},
                                                                     {p, p, f, f, H, nullptr, H, I}};
  };
  for (auto [k, H, I] : {std::tuple<int64_t, int64_t, int64_t>{10, 2560, 640}, {10, 2560, 320}, {10, 2560, 160},
                         {4, 64, 64}}) {
    const auto [gu, dn] = projections(H, I);
    const cuda::SharedExpert shared{x, x, I, x, 1};
    EXPECT_TRUE(cuda::ExpertsAndSharedDecodeFits(gu, dn, 1, k, shared)) << "k " << k << " H " << H << " I " << I;
    EXPECT_TRUE(cuda::ExpertsAndSharedDecodeFits(gu, dn, cuda::kPairwiseMaxTokens, k, shared));
    EXPECT_FALSE(cuda::ExpertsAndSharedDecodeFits(gu, dn, cuda::kPairwiseMaxTokens + 1, k, shared));
  }
  const auto [gu, dn] = projections(2560, 2048);  // 64 chunks a row: 16 lanes
  EXPECT_FALSE(cuda::ExpertsAndSharedDecodeFits(gu, dn, 1, 10, {x, x, 2048, x, 1}));
  const auto [gu48, dn48] = projections(96, 48);  // K not a multiple of 32
  EXPECT_FALSE(cuda::ExpertsAndSharedDecodeFits(gu48, dn48, 1, 3, {x, x, 48, x, 1}));
  auto [gd, dd] = projections(2560, 640);
  gd.dense = dd.dense = x;
  EXPECT_FALSE(cuda::ExpertsAndSharedDecodeFits(gd, dd, 1, 10, {x, x, 640, x, 1}));
  EXPECT_FALSE(cuda::ExpertsAndSharedDecodeFits(projections(2560, 640).first, projections(2560, 640).second, 1, 10,
                                                {x + 1, x, 640, x, 1}))
      << "a shared gate/up output that is not 16-byte aligned";
}

// The grouped route takes 128-row tiles where the experts average 128 pairs or more (the model's
// 8,192-token prefill chunk at any TP: 81,920 pairs over 512 experts), 64 rows below (2,048 tokens).
// Only the shapes are asked: no GPU needed.
TEST(MoeCuda, GroupedRouteTakesTallTilesForFullExperts) {
  EXPECT_EQ(cuda::ChooseGroupedTile(8192 * 10, 512), cuda::GroupedTile::k128x128k64w8);
  EXPECT_EQ(cuda::ChooseGroupedTile(128 * 512, 512), cuda::GroupedTile::k128x128k64w8);
  EXPECT_EQ(cuda::ChooseGroupedTile(128 * 512 - 1, 512), cuda::GroupedTile::k64x128k64w8);
  EXPECT_EQ(cuda::ChooseGroupedTile(2048 * 10, 512), cuda::GroupedTile::k64x128k64w8);
  EXPECT_EQ(cuda::ChooseGroupedTile(900, 3), cuda::GroupedTile::k128x128k64w8);  // GroupedNvfp4ExpertsForPrefill's
}

TEST(MoeCuda, Nvfp4ExpertsAtModelWidth) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  // The chunked down kernel at 4, 2, 1 and 16 lanes a row (K = 640, 320, 160, 2048).
  ExpectSameExperts(b, 1, 12, 10, 2560, 640, true);  // decode, TP1
  ExpectSameExperts(b, 2, 12, 10, 2560, 320, true);  // TP2 slice of I
  ExpectSameExperts(b, 3, 12, 10, 2560, 160, true);  // TP4 slice of I
  ExpectSameExperts(b, 1, 4, 2, 2048, 2048, true);   // 16 lanes a row, 2 rows a warp
  // The decode kernels at the tiny model's width (1 lane a row, 32 rows a block), and with H not
  // a multiple of a block's rows.
  ExpectSameExperts(b, 1, 8, 4, 64, 64, true);
  ExpectSameExperts(b, 2, 8, 4, 80, 64, true);
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
