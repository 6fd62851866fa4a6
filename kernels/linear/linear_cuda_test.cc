// The FP16 linear kernels against the FP32 reference: the vector GEMV of decode (in every
// configuration ChooseGemv can return), the scalar GEMV for other K, the WMMA GEMM of prefill (in
// every tile); at
// the model's projection shapes and at shapes no tile, lane group or block divides.
#include "kernels/linear/linear_cuda.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

struct Shape {
  int64_t T, K, N;
};

// Seeded x [T, K] and w [N, K] on both backends, y by the CPU reference and by `gpu(b, x, w, y)`
// (the GPU backend and its tensors): whether the two match.
template <typename Gpu>
::testing::AssertionResult MatchesReference(const Shape& s, uint32_t seed, Gpu gpu) {
  BackendPair b;
  auto x = b.Act(Normal(s.T * s.K, seed), {s.T, s.K});
  std::vector<float> w = Normal(s.N * s.K, seed + 1);
  for (float& v : w) v *= 0.05f;
  auto wt = b.Act(w, {s.N, s.K});
  auto y = b.Out({s.T, s.N});
  b.cpu().Linear(x.cpu.t(), wt.cpu.t(), y.cpu.t());
  gpu(b, x.gpu.t(), wt.gpu.t(), y.gpu.t());
  return b.Matches(y);
}

const __half* Half(const Tensor& t) { return static_cast<const __half*>(t.data); }
__half* Half(Tensor& t) { return static_cast<__half*>(t.data); }

class LinearCuda : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearCuda, MatchesReference) {
  Q38_REQUIRE_GPU();
  const Shape s = GetParam();
  EXPECT_TRUE(MatchesReference(s, 1, [](BackendPair& b, const Tensor& x, const Tensor& w, Tensor& y) {
    b.gpu().Linear(x, w, y);
  })) << "T " << s.T << " K " << s.K << " N " << s.N;
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
                      Shape{65, 64, 65},
                      // The vector GEMV (ChooseGemv): lane groups of 8 (K < 128), 16 (K < 512) and
                      // 32, T from 1 to 8, N no block divides:
                      Shape{1, 320, 10239},   // HC up: 16 lanes a row, the last block part past N
                      Shape{7, 320, 1001},    // 16 lanes, T = 7
                      Shape{2, 640, 2561},    // 32 lanes, eight loads a lane
                      Shape{6, 1280, 333},    // split K, several token rows
                      Shape{1, 10240, 324},   // HC down: 8 warps split each row's K
                      Shape{8, 6144, 97},     // split K at T = 8
                      Shape{1, 2560, 16481},  // GDN stack: a warp a row, four loads a lane
                      Shape{1, 2560, 1793},   // router + shared expert stack
                      Shape{4, 2568, 129},    // K not a multiple of a lane group's stride
                      Shape{1, 8, 3},         // one 16-byte run a row: 8 lanes
                      Shape{3, 120, 50},      // 8 lanes, split K
                      Shape{2, 1002, 9},      // K not a multiple of 8 with K > 1000: the scalar GEMV
                      Shape{5, 24, 1}));

// Every vector GEMV configuration ChooseGemv can return, at every split, against the reference:
// shapes no block, lane group or batch divides.
struct ConfigCase {
  cuda::GemvConfig config;
  Shape shape;
};

class LinearGemvConfig : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(LinearGemvConfig, MatchesReference) {
  Q38_REQUIRE_GPU();
  const cuda::GemvConfig c = GetParam().config;
  const Shape s = GetParam().shape;
  EXPECT_TRUE(MatchesReference(s, 3, [&](BackendPair& b, const Tensor& x, const Tensor& w, Tensor& y) {
    cuda::LinearGemv(c, Half(x), Half(w), Half(y), s.T, s.K, s.N, b.gpu().stream());
  })) << "lanes " << c.lanes << " unroll " << c.unroll << " splits " << c.splits << "; T " << s.T << " K " << s.K << " N " << s.N;
}

std::vector<ConfigCase> ConfigCases() {
  std::vector<ConfigCase> cases;
  for (const int lanes : {8, 16, 32})
    for (const int unroll : {4, 8})
      for (const int splits : {1, 2, 4, 8})
        for (const Shape s : {Shape{1, 1000, 77}, Shape{3, 264, 45}, Shape{8, 2056, 19}})
          cases.push_back({{lanes, unroll, splits}, s});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Configs, LinearGemvConfig, ::testing::ValuesIn(ConfigCases()),
                         [](const ::testing::TestParamInfo<ConfigCase>& p) {
                           const cuda::GemvConfig& c = p.param.config;
                           const Shape& s = p.param.shape;
                           return "g" + std::to_string(c.lanes) + "u" + std::to_string(c.unroll) + "s" +
                                  std::to_string(c.splits) + "_T" + std::to_string(s.T) + "K" + std::to_string(s.K) +
                                  "N" + std::to_string(s.N);
                         });

// Every prefill GEMM tile against the reference, at shapes no tile divides (rows and columns past
// the edges, K not a multiple of the 32-column step, K not a multiple of 8: loads element by
// element), and one where several steps of K pipeline through both shared buffers.
struct TileCase {
  cuda::GemmTile tile;
  Shape shape;
};

class LinearGemmTile : public ::testing::TestWithParam<TileCase> {};

TEST_P(LinearGemmTile, MatchesReference) {
  Q38_REQUIRE_GPU();
  const TileCase c = GetParam();
  const Shape s = c.shape;
  EXPECT_TRUE(MatchesReference(s, 5, [&](BackendPair& b, const Tensor& x, const Tensor& w, Tensor& y) {
    cuda::LinearGemm(c.tile, Half(x), Half(w), Half(y), s.T, s.K, s.N, b.gpu().stream());
  })) << cuda::GemmTileName(c.tile) << "; T " << s.T << " K " << s.K << " N " << s.N;
}

std::vector<TileCase> TileCases() {
  std::vector<TileCase> cases;
  for (const cuda::GemmTile tile : cuda::kGemmTiles)
    for (const Shape s : {Shape{9, 40, 7}, Shape{300, 1000, 259}, Shape{129, 2560, 130}, Shape{70, 36, 33},
                          Shape{257, 100, 77}})
      cases.push_back({tile, s});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Tiles, LinearGemmTile, ::testing::ValuesIn(TileCases()),
                         [](const ::testing::TestParamInfo<TileCase>& p) {
                           const Shape& s = p.param.shape;
                           return std::string("t") + cuda::GemmTileName(p.param.tile) + "_T" + std::to_string(s.T) +
                                  "K" + std::to_string(s.K) + "N" + std::to_string(s.N);
                         });

// The tile is a function of the shape: the model's prefill shapes take the largest tiles.
TEST(ChooseGemm, PrefillShapes) {
  EXPECT_EQ(cuda::ChooseGemm(8192, 2560, 10240), cuda::GemmTile::k128x128k64w8a2);  // GDN qkv
  EXPECT_EQ(cuda::ChooseGemm(8192, 2560, 16480), cuda::GemmTile::k128x128k64w8a2);  // a whole stack as one product
  EXPECT_EQ(cuda::ChooseGemm(8192, 6144, 2560), cuda::GemmTile::k128x128k64w8a2);   // GDN out, attention o
  EXPECT_EQ(cuda::ChooseGemm(8192, 10240, 324), cuda::GemmTile::k128x128k64w8a2);   // HC down: 192 blocks
  EXPECT_EQ(cuda::ChooseGemm(8192, 320, 10240), cuda::GemmTile::k128x128w4);        // HC up: five steps of K
  EXPECT_EQ(cuda::ChooseGemm(512, 6144, 2560), cuda::GemmTile::k128x128k64w8a2);    // a short prompt: 80 blocks
  EXPECT_EQ(cuda::ChooseGemm(512, 2560, 6144), cuda::GemmTile::k128x128k64w8a2);    // a short prompt's attention q
  EXPECT_EQ(cuda::ChooseGemm(512, 2560, 13952), cuda::GemmTile::k128x128k64w8a2);   // 436 blocks
  EXPECT_EQ(cuda::ChooseGemm(256, 2560, 13952), cuda::GemmTile::k128x128k64w8);   // fewer rows, wide N
  EXPECT_EQ(cuda::ChooseGemm(300, 6144, 2560), cuda::GemmTile::k64x64w4);         // fewer rows and columns
  EXPECT_EQ(cuda::ChooseGemm(384, 2560, 6144), cuda::GemmTile::k128x64w4);
  EXPECT_EQ(cuda::ChooseGemm(9, 2560, 340), cuda::GemmTile::k64x64w4);            // just past the GEMV limit
}

// The configuration is a function of the shape: the model's decode shapes take the paths the
// bench measured (docs/journal/2026-12-02-gemv-lab-bench.md).
TEST(ChooseGemv, ModelShapes) {
  auto is = [](const cuda::GemvConfig& c, int lanes, int unroll, int splits) {
    return c.lanes == lanes && c.unroll == unroll && c.splits == splits;
  };
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 2560, 16480), 32, 4, 1));   // GDN stack
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 2560, 248320), 32, 4, 1));  // lm_head
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 2560, 1793), 32, 4, 2));    // router + shared expert
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 6144, 2560), 32, 4, 2));    // GDN out, attention o
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 320, 10240), 16, 4, 1));    // HC up
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 10240, 324), 32, 8, 8));    // HC down
  EXPECT_TRUE(is(cuda::ChooseGemv(1, 640, 2560), 32, 8, 1));     // shared expert down
  EXPECT_TRUE(is(cuda::ChooseGemv(4, 6144, 2560), 32, 4, 8));    // more splits for more token rows
}

}  // namespace
}  // namespace q38
