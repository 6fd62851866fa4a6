// Partial RoPE on the GPU against the reference, at positions up to the full context; and the
// fused per-head norm, rotation and cache write (NormRope) against the reference and, bitwise,
// against the GPU's composition of three kernels.
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(RopeCuda, PartialRotationAtFarPositions) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const std::vector<int64_t> pos = {0, 1, 7, 4095, 8191, 131071, 262143};
  const int64_t T = static_cast<int64_t>(pos.size());
  for (auto [heads, dh, rd] : {std::tuple<int64_t, int64_t, int64_t>{24, 256, 64}, {4, 128, 64}, {3, 32, 8}}) {
    auto x = b.Act(Normal(T * heads * dh, 11), {T, heads, dh});
    auto p = b.Raw(pos.data(), DType::kI64, {T});
    b.cpu().Rope(x.cpu.t(), p.cpu.t(), rd, 1e7);
    b.gpu().Rope(x.gpu.t(), p.gpu.t(), rd, 1e7);
    // Angles reach 2.6e5 rad at theta 1e7: FP32 angle rounding shows, so a few times the FP16 bound.
    EXPECT_TRUE(b.Matches(x, 4)) << "heads " << heads << " dh " << dh;
  }
}

TEST(RopeCuda, NormRopeMatchesReferenceAndComposition) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  Backend& gpu = b.gpu();
  const std::vector<int64_t> pos = {3, 0, 4095, 8191};
  const int64_t T = static_cast<int64_t>(pos.size()), slots = 8192;
  auto p = b.Raw(pos.data(), DType::kI64, {T});
  const auto floats = [&](const Buffer& buf) {
    std::vector<float> v(buf.t().numel());
    EXPECT_TRUE(gpu.Synchronize().ok());
    gpu.CopyToHost(buf.t(), v.data());
    return v;
  };
  // Attention's q and k at TP1, the indexer's q, a head_dim off the 16-byte path, no rotation.
  for (auto [heads, dh, rd] : {std::tuple<int64_t, int64_t, int64_t>{24, 256, 64}, {2, 256, 64}, {4, 128, 64},
                               {3, 36, 8}, {2, 64, 0}}) {
    const std::vector<float> x0 = Normal(T * heads * dh, 21);
    std::vector<float> w = Normal(dh, 22);
    for (float& v : w) v *= 0.3f;
    auto x = b.Act(x0, {T, heads, dh}), wt = b.Act(w, {dh});
    auto cache = b.Act(std::vector<float>(slots * heads * dh, 0.0f), {slots, heads, dh});
    b.cpu().NormRope(x.cpu.t(), wt.cpu.t(), p.cpu.t(), rd, 1e7, 1e-6f, cache.cpu.t());
    gpu.NormRope(x.gpu.t(), wt.gpu.t(), p.gpu.t(), rd, 1e7, 1e-6f, cache.gpu.t());
    EXPECT_TRUE(b.Matches(x, 4)) << "heads " << heads << " dh " << dh;
    Buffer x2 = gpu.Upload(x0, {T, heads, dh});
    Buffer cache2 = gpu.Upload(std::vector<float>(slots * heads * dh, 0.0f), {slots, heads, dh});
    gpu.Backend::NormRope(x2.t(), wt.gpu.t(), p.gpu.t(), rd, 1e7, 1e-6f, cache2.t());
    EXPECT_EQ(floats(x.gpu), floats(x2)) << "fused against the composition, heads " << heads;
    std::vector<float> row(heads * dh), want(heads * dh);
    for (int64_t t = 0; t < T; ++t) {
      const Tensor slot = cache.gpu.t().Rows(pos[t], 1), slot2 = cache2.t().Rows(pos[t], 1);
      gpu.CopyToHost(slot, row.data());
      gpu.CopyToHost(slot2, want.data());
      EXPECT_EQ(row, want) << "cache row at position " << pos[t] << ", heads " << heads;
    }
    Tensor none;  // without a cache
    Buffer x3 = gpu.Upload(x0, {T, heads, dh});
    gpu.NormRope(x3.t(), wt.gpu.t(), p.gpu.t(), rd, 1e7, 1e-6f, none);
    EXPECT_EQ(floats(x3), floats(x2)) << "no cache, heads " << heads;
  }
}

}  // namespace
}  // namespace q38
