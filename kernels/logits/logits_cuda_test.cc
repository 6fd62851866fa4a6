// ArgMax on the GPU against the CPU reference, exactly: it only compares, so on the same FP16
// values both must return the same (value, index), at the lm_head's widths (V = 248,320 over 1, 2
// and 4 ranks) and small ones, with ties everywhere, NaN, ±inf and valid bounds inside a row.
// TopLogits: the same values and indices as the reference, its sum within FP32 reordering.
#include <cmath>

#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Uniform;
using cuda_test::BackendPair;

TEST(LogitsCuda, ArgMaxEqualsTheReference) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  int cases = 0;
  for (int64_t V : {int64_t{248320}, int64_t{124160}, int64_t{62080}, int64_t{1024}, int64_t{7}}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<float> x = Uniform(V, static_cast<uint32_t>(V + kind), -20, 20);
      if (kind == 1) {
        for (float& v : x) v = std::round(v / 4);  // 11 values: the maximum is tied many times
      } else if (kind == 2) {
        for (int64_t i = 0; i < V; i += 3) x[i] = NAN;
        x[V / 2] = INFINITY;
        x[V - 1] = INFINITY;
      } else if (kind == 3) {
        for (float& v : x) v = -INFINITY;
        x[V - 1] = NAN;
      } else if (kind == 4) {
        for (float& v : x) v = 1.0f;  // all tied: index 0 (or the first inside the bound)
      }
      auto logits = b.Act(x, {1, V});
      for (int64_t valid : {V, V - 1, V / 2 + 1, int64_t{1}, int64_t{0}}) {
        auto out = b.Out({2}, DType::kF32);
        b.cpu().ArgMax(logits.cpu.t(), valid, out.cpu.t());
        b.gpu().ArgMax(logits.gpu.t(), valid, out.gpu.t());
        const std::vector<float> got = b.GpuFloats(out), want = b.CpuFloats(out);
        const bool same = got[1] == want[1] && (got[0] == want[0] || (std::isnan(got[0]) && std::isnan(want[0])));
        EXPECT_TRUE(same) << "V " << V << " kind " << kind << " valid " << valid << ": got (" << got[0] << ", "
                          << got[1] << "), want (" << want[0] << ", " << want[1] << ")";
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 125);
}

TEST(LogitsCuda, TopLogitsEqualsTheReference) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  for (int64_t V : {int64_t{248320}, int64_t{62080}, int64_t{1000}, int64_t{7}}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x = Uniform(V, static_cast<uint32_t>(3 * V + kind), -20, 20);
      if (kind == 1) {
        for (float& v : x) v = std::round(v / 4);  // ties everywhere
      } else if (kind == 2) {
        for (int64_t i = 0; i < V; i += 3) x[i] = NAN;
        x[V - 1] = -INFINITY;
      }
      auto logits = b.Act(x, {1, V});
      for (int64_t valid : {V, V / 2 + 1, int64_t{1}, int64_t{0}}) {
        for (int64_t k : {int64_t{1}, int64_t{4}, int64_t{20}}) {
          auto out = b.Out({2 * k + 2}, DType::kF32);
          b.cpu().TopLogits(logits.cpu.t(), valid, k, out.cpu.t());
          b.gpu().TopLogits(logits.gpu.t(), valid, k, out.gpu.t());
          const std::vector<float> got = b.GpuFloats(out), want = b.CpuFloats(out);
          const std::string at = "V " + std::to_string(V) + " kind " + std::to_string(kind) + " valid " +
                                 std::to_string(valid) + " k " + std::to_string(k);
          for (int64_t j = 0; j < 2 * k + 1; ++j) EXPECT_EQ(got[j], want[j]) << at << " slot " << j;
          EXPECT_NEAR(got[2 * k + 1], want[2 * k + 1], 1e-5 * want[2 * k + 1]) << at;
        }
      }
    }
  }
}

// Inside a recorded graph, reading a buffer other work rewrites between replays (the decode
// graph's logits): every replay reduces the current values.
TEST(LogitsCuda, ArgMaxInsideAGraphFollowsItsInput) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t V = 248320;
  Buffer logits = b.gpu().Alloc(DType::kF16, {1, V}), out = b.gpu().Alloc(DType::kF32, {2});
  auto graph = b.gpu().Capture([&]() -> absl::Status {
    b.gpu().ArgMax(logits.t(), V - 5, out.t());
    return absl::OkStatus();
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int64_t at : {int64_t{0}, int64_t{1234}, V - 6, V - 2, int64_t{77777}}) {
    std::vector<uint16_t> host(V, FloatToFp16(-1.0f));
    host[at] = FloatToFp16(2.5f);
    b.gpu().CopyFromHost(host.data(), logits.t());
    ASSERT_TRUE((*graph)->Replay().ok());
    float got[2];
    b.gpu().CopyToHost(out.t(), got);
    const bool inside = at < V - 5;
    EXPECT_EQ(got[0], inside ? 2.5f : -1.0f) << at;
    EXPECT_EQ(got[1], inside ? static_cast<float>(at) : 0.0f) << at;
  }
}

}  // namespace
}  // namespace q38
