// The CUDA backend's own parts: elementwise ops and position-addressed cache writes against the
// CPU backend, the FP16 overflow count at upload, the allocator's reuse, and graph capture:
// replays that follow changing inputs and equal eager runs bit for bit; the grid kernels' names.
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

// --cuda_grid_kernels's values: all (or indexer) and none, anything else refused by name.
TEST(CudaBackend, GridKernelsByName) {
  for (const char* spec : {"all", "indexer"}) {
    const absl::StatusOr<GridKernels> g = ParseGridKernels(spec);
    ASSERT_TRUE(g.ok()) << spec << ": " << g.status();
    EXPECT_TRUE(g->indexer) << spec;
    EXPECT_EQ(GridKernelsName(*g), "all") << spec;
  }
  const absl::StatusOr<GridKernels> none = ParseGridKernels("none");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->indexer);
  EXPECT_EQ(GridKernelsName(*none), "none");
  for (const char* bad : {"", "hc", "indexer,", "INDEXER", "all,indexer", "moe,gdn"}) {
    const absl::StatusOr<GridKernels> g = ParseGridKernels(bad);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
  }
}

TEST(CudaBackend, ElementwiseOps) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t n = 10007;
  auto x = b.Act(Normal(n, 1), {n});
  auto y = b.Act(Normal(n, 2), {n});
  b.cpu().Add(x.cpu.t(), y.cpu.t());
  b.gpu().Add(x.gpu.t(), y.gpu.t());
  EXPECT_TRUE(b.Matches(x));
  b.cpu().SigmoidMul(x.cpu.t(), y.cpu.t());
  b.gpu().SigmoidMul(x.gpu.t(), y.gpu.t());
  EXPECT_TRUE(b.Matches(x));
  auto streams = b.F32(Normal(n, 3), {n});  // FP32 residual streams += an FP16 activation
  b.cpu().Add(streams.cpu.t(), y.cpu.t());
  b.gpu().Add(streams.gpu.t(), y.gpu.t());
  EXPECT_TRUE(b.Matches(streams, 0.01));
  auto f = b.Out({3, 5}, DType::kF32);
  b.cpu().Fill(f.cpu.t(), 0.5f);
  b.gpu().Fill(f.gpu.t(), 0.5f);
  EXPECT_TRUE(b.Matches(f, 0));
}

TEST(CudaBackend, WriteRowsAtDevicePositions) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  auto cache = b.Act(std::vector<float>(50 * 2 * 8, 0.0f), {50, 2, 8});
  auto src = b.Act(Normal(3 * 16, 3), {3, 2, 8});
  const std::vector<int64_t> pos = {7, 8, 49};
  auto p = b.Raw(pos.data(), DType::kI64, {3});
  b.cpu().WriteRows(src.cpu.t(), cache.cpu.t(), p.cpu.t());
  b.gpu().WriteRows(src.gpu.t(), cache.gpu.t(), p.gpu.t());
  EXPECT_TRUE(b.Matches(cache, 0));
}

TEST(CudaBackend, UploadCountsValuesOutsideFp16) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t before = b.gpu().overflow_count();
  b.gpu().Upload({1.0f, 70000.0f, -1e6f, 65504.0f, INFINITY}, {5});
  EXPECT_EQ(b.gpu().overflow_count() - before, 2);  // 65504 fits; an infinity was never finite
}

TEST(CudaBackend, AllocatorReusesFreedBlocks) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  void* first = nullptr;
  {
    Buffer a = b.gpu().Alloc(DType::kF16, {1000});
    first = a.t().data;
  }
  const size_t reserved = b.gpu().reserved_bytes();
  Buffer again = b.gpu().Alloc(DType::kF16, {999});  // same rounded size
  EXPECT_EQ(again.t().data, first);
  EXPECT_EQ(b.gpu().reserved_bytes(), reserved);
  EXPECT_EQ(cuda::RoundBlock(1), 256u);
  EXPECT_EQ(cuda::RoundBlock(5000), 5120u);
}

// A small step (linear, norm, residual add) recorded once and replayed on new inputs staged
// into the same buffers, against the same step run eagerly.
TEST(CudaBackend, GraphReplaysFollowChangingInputs) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  CudaBackend& g = b.gpu();
  const int64_t K = 256, N = 512;
  Buffer x = g.Alloc(DType::kF16, {1, K}), acc = g.Alloc(DType::kF16, {1, N});
  Buffer w = g.Upload(Normal(N * K, 4), {N, K}), nw = g.Upload(Normal(N, 5), {N});
  Buffer out;
  auto step = [&](Buffer& y) {
    g.Linear(x.t(), w.t(), y.t());
    g.RmsNorm(y.t(), nw.t(), y.t(), N, true, 1e-6f);
    g.Add(y.t(), acc.t());
  };
  auto graph = g.Capture([&]() -> absl::Status {
    out = g.Alloc(DType::kF16, {1, N});
    step(out);
    return absl::OkStatus();
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (uint32_t i = 0; i < 64; ++i) {
    const std::vector<float> xin = Normal(K, 100 + i), ain = Normal(N, 200 + i);
    Buffer xs = g.Upload(xin, {1, K}), as = g.Upload(ain, {1, N});
    g.Copy(xs.t(), x.t());
    g.Copy(as.t(), acc.t());
    g.Fill(out.t(), NAN);
    ASSERT_TRUE((*graph)->Replay().ok());
    std::vector<float> replayed(N), eager(N);
    g.CopyToHost(out.t(), replayed.data());
    Buffer e = g.Alloc(DType::kF16, {1, N});
    step(e);
    g.CopyToHost(e.t(), eager.data());
    ASSERT_EQ(std::memcmp(replayed.data(), eager.data(), N * sizeof(float)), 0) << "step " << i;
    ASSERT_TRUE(cpu::op_test::NoNan(replayed));
  }
}

}  // namespace
}  // namespace q38
