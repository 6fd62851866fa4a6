// Partial RoPE on the GPU against the reference, at positions up to the full context; and the
// fused per-head norm, rotation and cache write (NormRope) against the reference and, bitwise,
// against the GPU's composition of three kernels; an attention layer's inputs in one kernel.
#include <string>

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

// An attention layer's inputs in one kernel (Backend::PrepareAttentionInputs): q, k (with its cache)
// and the indexer's q normalized and rotated, v and the raw indexer key copied into their caches;
// bitwise against the GPU's five ops, at the model's TP1 and TP4 head counts, the tiny model's, and
// with an indexer head_dim off the 16-byte path (the composition then).
TEST(RopeCuda, AttentionInputsInOneKernel) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  Backend& gpu = b.gpu();
  const std::vector<int64_t> pos = {5, 0, 4095};
  const int64_t T = static_cast<int64_t>(pos.size()), slots = 4096;
  auto p = b.Raw(pos.data(), DType::kI64, {T});
  const auto floats = [&](const Tensor& t) {
    std::vector<float> v(t.numel());
    EXPECT_TRUE(gpu.Synchronize().ok());
    gpu.CopyToHost(t, v.data());
    return v;
  };
  struct Shape {
    int64_t Hq, Hkv, dh, Hi, di, rd;
  };
  for (const Shape& c : {Shape{24, 2, 256, 16, 128, 64}, Shape{6, 1, 256, 16, 128, 64}, Shape{4, 2, 16, 2, 16, 8},
                         Shape{4, 2, 64, 2, 36, 8}}) {
    uint32_t seed = 30;
    // Two copies of every tensor: one for the fused op, one for the composition.
    struct Side {
      Buffer q, k, v, iq, raw, k_cache, v_cache, raw_cache;
    };
    const std::vector<float> q0 = Normal(T * c.Hq * c.dh, seed++), k0 = Normal(T * c.Hkv * c.dh, seed++),
                             v0 = Normal(T * c.Hkv * c.dh, seed++), iq0 = Normal(T * c.Hi * c.di, seed++),
                             raw0 = Normal(T * c.di, seed++);
    const auto side = [&] {
      return Side{gpu.Upload(q0, {T, c.Hq, c.dh}),
                  gpu.Upload(k0, {T, c.Hkv, c.dh}),
                  gpu.Upload(v0, {T, c.Hkv, c.dh}),
                  gpu.Upload(iq0, {T, c.Hi, c.di}),
                  gpu.Upload(raw0, {T, c.di}),
                  gpu.Upload(std::vector<float>(slots * c.Hkv * c.dh, 0.0f), {slots, c.Hkv, c.dh}),
                  gpu.Upload(std::vector<float>(slots * c.Hkv * c.dh, 0.0f), {slots, c.Hkv, c.dh}),
                  gpu.Upload(std::vector<float>(slots * c.di, 0.0f), {slots, c.di})};
    };
    std::vector<float> qw = Normal(c.dh, seed++), kw = Normal(c.dh, seed++), iw = Normal(c.di, seed++);
    Buffer qn = gpu.Upload(qw, {c.dh}), kn = gpu.Upload(kw, {c.dh}), in = gpu.Upload(iw, {c.di});
    Side fused = side(), composed = side();
    const auto inputs = [&](Side& s) {
      return Backend::AttentionInputs{s.q.t(), qn.t(),        s.k.t(),  kn.t(),  s.k_cache.t(),  s.v.t(),
                                      s.v_cache.t(), s.iq.t(), in.t(), s.raw.t(), s.raw_cache.t()};
    };
    Backend::AttentionInputs a = inputs(fused), c5 = inputs(composed);
    gpu.PrepareAttentionInputs(a, p.gpu.t(), c.rd, 1e7, 1e-6f);
    gpu.Backend::PrepareAttentionInputs(c5, p.gpu.t(), c.rd, 1e7, 1e-6f);
    const std::string at = "Hq " + std::to_string(c.Hq) + " dh " + std::to_string(c.dh) + " di " + std::to_string(c.di);
    EXPECT_EQ(floats(fused.q.t()), floats(composed.q.t())) << "q, " << at;
    EXPECT_EQ(floats(fused.k.t()), floats(composed.k.t())) << "k, " << at;
    EXPECT_EQ(floats(fused.iq.t()), floats(composed.iq.t())) << "indexer q, " << at;
    EXPECT_EQ(floats(fused.k_cache.t()), floats(composed.k_cache.t())) << "k cache, " << at;
    EXPECT_EQ(floats(fused.v_cache.t()), floats(composed.v_cache.t())) << "v cache, " << at;
    EXPECT_EQ(floats(fused.raw_cache.t()), floats(composed.raw_cache.t())) << "raw key cache, " << at;
    const std::vector<float> raw = floats(fused.raw.t());
    EXPECT_EQ(floats(fused.raw_cache.t().Rows(pos[2], 1)), std::vector<float>(raw.begin() + 2 * c.di, raw.end()))
        << "a raw key at its position, " << at;
  }
}

}  // namespace
}  // namespace q38
