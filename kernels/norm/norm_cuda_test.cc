// RMSNorm variants on the GPU against the reference: whole rows, per-head groups with a
// repeating weight, from the FP32 residual streams, in place, and the GDN gated norm with both
// gates.
#include <tuple>

#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(NormCuda, GroupedZeroCentredAndPlain) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  struct Case {
    int64_t rows, n, group, w_len;
    bool zero_centred;
  };
  for (const Case c : {Case{3, 10240, 2560, 10240, true}, Case{5, 6144, 256, 256, true},
                       Case{2, 100, 25, 100, false}, Case{7, 48, 48, 48, true}, Case{2, 5120, 5120, 5120, true},
                       Case{3, 1000, 500, 500, false}}) {
    auto x = b.Act(Normal(c.rows * c.n, 3), {c.rows, c.n});
    std::vector<float> w = Normal(c.w_len, 4);
    for (float& v : w) v *= 0.3f;
    auto wt = b.Act(w, {c.w_len});
    auto y = b.Out({c.rows, c.n});
    b.cpu().RmsNorm(x.cpu.t(), wt.cpu.t(), y.cpu.t(), c.group, c.zero_centred, 1e-6f);
    b.gpu().RmsNorm(x.gpu.t(), wt.gpu.t(), y.gpu.t(), c.group, c.zero_centred, 1e-6f);
    EXPECT_TRUE(b.Matches(y)) << "n " << c.n << " group " << c.group;
  }
}

// The hyper-connection norms read the FP32 residual streams.
TEST(NormCuda, FromFp32Streams) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (auto [rows, n, group] : {std::tuple<int64_t, int64_t, int64_t>{3, 10240, 2560}, {2, 100, 25}}) {
    std::vector<float> xs = Normal(rows * n, 7);
    for (float& v : xs) v = v * 40 + 0.001f;  // values FP16 would round
    auto x = b.F32(xs, {rows, n});
    auto w = b.Act(Normal(n, 8), {n});
    auto y = b.Out({rows, n});
    b.cpu().RmsNorm(x.cpu.t(), w.cpu.t(), y.cpu.t(), group, true, 1e-6f);
    b.gpu().RmsNorm(x.gpu.t(), w.gpu.t(), y.gpu.t(), group, true, 1e-6f);
    EXPECT_TRUE(b.Matches(y)) << "n " << n << " group " << group;
  }
}

TEST(NormCuda, InPlace) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  auto x = b.Act(Normal(4 * 3 * 256, 5), {4, 3, 256});
  auto w = b.Act(Normal(256, 6), {256});
  b.cpu().RmsNorm(x.cpu.t(), w.cpu.t(), x.cpu.t(), 256, true, 1e-6f);
  b.gpu().RmsNorm(x.gpu.t(), w.gpu.t(), x.gpu.t(), 256, true, 1e-6f);
  EXPECT_TRUE(b.Matches(x));
}

TEST(NormCuda, GatedSigmoidAndSilu) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (bool sigmoid : {true, false}) {
    auto o = b.Act(Normal(3 * 6144, 7), {3, 6144});
    auto z = b.Act(Normal(3 * 6144, 8), {3, 6144});
    auto w = b.Act(Normal(128, 9), {128});
    auto y = b.Out({3, 6144});
    b.cpu().GatedRmsNorm(o.cpu.t(), z.cpu.t(), w.cpu.t(), y.cpu.t(), sigmoid, 1e-6f);
    b.gpu().GatedRmsNorm(o.gpu.t(), z.gpu.t(), w.gpu.t(), y.gpu.t(), sigmoid, 1e-6f);
    EXPECT_TRUE(b.Matches(y)) << (sigmoid ? "sigmoid" : "silu");
  }
}

}  // namespace
}  // namespace q38
