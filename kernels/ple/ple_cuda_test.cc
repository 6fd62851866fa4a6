// The PLE ops on the GPU against the reference: staged FP8, BF16 and F32 rows read from pinned
// host memory and scaled, and the per-stream gate at the model's width.
#include <random>

#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(PleCuda, LoadsStagedRowsOfEveryTableDtype) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t T = 3, width = 16 * 160;
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF8E4M3, DType::kBF16, DType::kF32}) {
    std::vector<uint8_t> bytes(T * width * DTypeSize(dtype));
    for (auto& v : bytes) v = static_cast<uint8_t>(rng());
    if (dtype != DType::kF8E4M3) {  // keep BF16/F32 values finite and moderate
      const std::vector<float> vals = Normal(T * width, 2);
      for (int64_t i = 0; i < T * width; ++i) {
        if (dtype == DType::kBF16) {
          const uint16_t h = FloatToBf16(vals[i]);
          std::memcpy(&bytes[2 * i], &h, 2);
        } else {
          std::memcpy(&bytes[4 * i], &vals[i], 4);
        }
      }
    } else {
      for (auto& v : bytes) v &= 0xF7;  // no NaN codes (0x7F, 0xFF)
    }
    Buffer cpu_stage = b.cpu().AllocStaging(dtype, {T, width}), gpu_stage = b.gpu().AllocStaging(dtype, {T, width});
    std::memcpy(cpu_stage.t().data, bytes.data(), bytes.size());
    std::memcpy(gpu_stage.t().data, bytes.data(), bytes.size());
    auto E = b.Out({T, width});
    const float scale = dtype == DType::kF8E4M3 ? 0.01f : 1.0f;
    b.cpu().PleLoad(cpu_stage.t(), scale, E.cpu.t());
    b.gpu().PleLoad(gpu_stage.t(), scale, E.gpu.t());
    EXPECT_TRUE(b.Matches(E)) << DTypeName(dtype);
  }
}

TEST(PleCuda, Gate) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t T = 4, S = 4, H = 2560;
  auto kn = b.Act(Normal(T * S * H, 3), {T, S * H});
  auto qn = b.Act(Normal(T * S * H, 4), {T, S * H});
  auto v = b.Act(Normal(T * H, 5), {T, H});
  auto G = b.Out({T, S * H});
  b.cpu().PleGate(kn.cpu.t(), qn.cpu.t(), v.cpu.t(), G.cpu.t());
  b.gpu().PleGate(kn.gpu.t(), qn.gpu.t(), v.gpu.t(), G.gpu.t());
  EXPECT_TRUE(b.Matches(G));
}

}  // namespace
}  // namespace q38
