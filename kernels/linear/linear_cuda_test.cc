// The FP16 linear kernels (GEMV for decode, with K split over warps for small N; WMMA GEMM for
// prefill) against the FP32 reference, at the model's projection shapes and at shapes no tile
// divides.
#include "kernels/linear/linear_cuda.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

struct Shape {
  int64_t T, K, N;
};

class LinearCuda : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearCuda, MatchesReference) {
  Q38_REQUIRE_GPU();
  const Shape s = GetParam();
  BackendPair b;
  auto x = b.Act(Normal(s.T * s.K, 1), {s.T, s.K});
  std::vector<float> w = Normal(s.N * s.K, 2);
  for (float& v : w) v *= 0.05f;
  auto wt = b.Act(w, {s.N, s.K});
  auto y = b.Out({s.T, s.N});
  b.cpu().Linear(x.cpu.t(), wt.cpu.t(), y.cpu.t());
  b.gpu().Linear(x.gpu.t(), wt.gpu.t(), y.gpu.t());
  EXPECT_TRUE(b.Matches(y)) << "T " << s.T << " K " << s.K << " N " << s.N;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearCuda,
    ::testing::Values(Shape{1, 2560, 12288},  // q_proj at TP1, decode
                      Shape{1, 6144, 2560},   // o_proj
                      Shape{4, 2560, 640},    // index_qk, a few rows
                      Shape{8, 320, 10240},   // hyper-connection up, the GEMV limit
                      Shape{3, 640, 2563},    // shared expert down; a block's last rows past N
                      Shape{1, 64, 96},       // tiny model
                      Shape{2, 16, 5},        // shorter K than a warp's one 16-byte run
                      Shape{9, 2560, 340},    // just past the GEMV limit: the GEMM
                      Shape{200, 2560, 1280}, // prefill
                      Shape{1, 10240, 20},    // hyper-connection down: 8 warps split each row's K
                      Shape{5, 2560, 3},      // a few rows, split K
                      Shape{2, 3000, 7},      // split K on the scalar GEMV; a block's last row past N
                      Shape{3, 100, 77},      // K not a multiple of 8: the scalar GEMV
                      Shape{70, 36, 33},      // nothing divides: edge tiles, scalar loads
                      Shape{65, 64, 65}));

}  // namespace
}  // namespace q38
