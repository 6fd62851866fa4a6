// Partial RoPE on the GPU against the reference, at positions up to the full context.
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

}  // namespace
}  // namespace q38
