// The FP16-contract emulation: activations come out as the CPU's FP32 results rounded to FP16,
// everything else exactly as the CPU backend computes it.
#include "kernels/fp16_emulation.h"

#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/testing/op_test_util.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;

float Half(float v) { return Fp16ToFloat(FloatToFp16(v)); }

std::vector<float> Read(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  b.CopyToHost(t, v.data());
  return v;
}

// y = x·wᵀ on both backends; x and w are FP16 values, so only the output's rounding differs.
struct LinearCase {
  std::vector<float> x = Normal(3 * 40, 1), w = Normal(5 * 40, 2);
  LinearCase() {
    for (float& v : x) v = Half(v);
    for (float& v : w) v = Half(v);
  }
  std::vector<float> On(Backend& b, DType out) {
    Buffer xb = b.Upload(x, {3, 40}), wb = b.Upload(w, {5, 40}), y = b.Alloc(out, {3, 5});
    b.Linear(xb.t(), wb.t(), y.t());
    return Read(b, y.t());
  }
};

TEST(Fp16Emulation, ActivationsAreTheCpuResultRoundedToFp16) {
  auto emu = MakeFp16EmulationBackend();
  auto cpu = MakeCpuBackend();
  EXPECT_EQ(emu->act_dtype(), DType::kF16);
  LinearCase c;
  const std::vector<float> want = c.On(*cpu, DType::kF32), got = c.On(*emu, DType::kF16);
  int rounded = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], Half(want[i])) << i;
    rounded += got[i] != want[i];
  }
  EXPECT_GT(rounded, 0);  // the case is not FP16-exact by accident
}

TEST(Fp16Emulation, Fp32TensorsAndExactOpsStayFp32) {
  LinearCase c;
  auto cpu = MakeCpuBackend();
  const std::vector<float> want = c.On(*cpu, DType::kF32);
  auto emu = MakeFp16EmulationBackend();
  EXPECT_EQ(c.On(*emu, DType::kF32), want);  // an FP32 buffer the model asked for
  auto exact = MakeFp16EmulationBackend({"Linear"});
  EXPECT_EQ(c.On(*exact, DType::kF16), want);  // an activation of an op left exact
}

TEST(Fp16Emulation, ViewsIntoActivationsAreRounded) {
  auto emu = MakeFp16EmulationBackend();
  Buffer cache = emu->Alloc(DType::kF16, {4, 2});
  emu->Fill(cache.t(), 0.0f);
  Buffer row = emu->UploadF32({1.0f / 3, 2.0f / 3}, {1, 2});
  std::vector<int64_t> pos = {2};
  Buffer p = emu->UploadRaw(pos.data(), DType::kI64, {1});
  emu->WriteRows(row.t(), cache.t(), p.t());
  const std::vector<float> got = Read(*emu, cache.t());
  EXPECT_EQ(got[4], Half(1.0f / 3));
  EXPECT_EQ(got[5], Half(2.0f / 3));
}

TEST(Fp16Emulation, WeightsAreRoundedAsTheGpuConvertsThem) {
  auto emu = MakeFp16EmulationBackend();
  EXPECT_EQ(Read(*emu, emu->Upload({1.0f / 3}, {1}).t())[0], Half(1.0f / 3));
  EXPECT_EQ(Read(*emu, emu->UploadF32({1.0f / 3}, {1}).t())[0], 1.0f / 3);
  auto exact = MakeFp16EmulationBackend({"Upload"});
  EXPECT_EQ(Read(*exact, exact->Upload({1.0f / 3}, {1}).t())[0], 1.0f / 3);
}

TEST(Fp16Emulation, FreedActivationsNoLongerRoundTheirAddresses) {
  auto emu = MakeFp16EmulationBackend();
  // Freed and reallocated at the same size, the allocator usually hands back the same address.
  for (int i = 0; i < 8; ++i) {
    { Buffer act = emu->Alloc(DType::kF16, {64}); }
    Buffer f32 = emu->Alloc(DType::kF32, {64});
    emu->Fill(f32.t(), 1.0f / 3);
    EXPECT_EQ(Read(*emu, f32.t())[0], 1.0f / 3);
  }
}

}  // namespace
}  // namespace q38
