// QSA on the GPU against the reference: block pooling at block ends only, top-k selection
// (sparse, dense, and all-tied scores), and attention over a selection plus the tail, split
// across the context for decode and whole for prefill.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "kernels/attention/attention_cuda.h"
#include "kernels/testing/backend_pair.h"

namespace q38 {
namespace {

using cpu::op_test::Normal;
using cuda_test::BackendPair;

TEST(AttentionCuda, PoolsOnlyCompletedBlocks) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t ctx = 64, di = 128, ratio = 4, blocks = ctx / ratio + 1;
  auto raw = b.Act(Normal(ctx * di, 1), {ctx, di});
  auto w = b.Act(Normal(di, 2), {di});
  const std::vector<int64_t> pos = {2, 3, 4, 5, 6, 7, 35, 63};  // complete blocks 0, 1, 8, 15
  auto p = b.Raw(pos.data(), DType::kI64, {static_cast<int64_t>(pos.size())});
  auto pooled = b.Act(std::vector<float>(blocks * di, 0.25f), {blocks, di});
  b.cpu().IndexerPoolBlocks(raw.cpu.t(), w.cpu.t(), pooled.cpu.t(), p.cpu.t(), ratio, 1e-6f, 64, 1e7);
  b.gpu().IndexerPoolBlocks(raw.gpu.t(), w.gpu.t(), pooled.gpu.t(), p.gpu.t(), ratio, 1e-6f, 64, 1e7);
  EXPECT_TRUE(b.Matches(pooled));
}

// Runs IndexerSelect on both and returns the GPU's selection after checking it equals the CPU's.
void ExpectSameSelection(BackendPair& b, const std::vector<float>& pooled_host, int64_t nblocks,
                         const std::vector<int64_t>& pos, int64_t max_blocks) {
  const int64_t T = static_cast<int64_t>(pos.size()), heads = 4, di = 128, ratio = 4;
  auto iq = b.Act(Normal(T * heads * di, 3), {T, heads, di});
  auto pooled = b.Act(pooled_host, {nblocks, di});
  auto p = b.Raw(pos.data(), DType::kI64, {T});
  auto sel = b.Out({T, max_blocks}, DType::kI32);
  b.cpu().IndexerSelect(iq.cpu.t(), pooled.cpu.t(), p.cpu.t(), sel.cpu.t(), ratio);
  b.gpu().IndexerSelect(iq.gpu.t(), pooled.gpu.t(), p.gpu.t(), sel.gpu.t(), ratio);
  EXPECT_EQ(b.GpuInts(sel), b.CpuInts(sel));
}

TEST(AttentionCuda, SelectsTheSameBlocks) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t nblocks = 3000;
  // Sparse at 12000 and 8191 (2048 and 3000 visible blocks > 512), dense at 2000 and 3.
  ExpectSameSelection(b, Normal(nblocks * 128, 4), nblocks, {11999, 8191, 2000, 3, 2050}, 512);
  ExpectSameSelection(b, Normal(nblocks * 128, 5), nblocks, {900, 33}, 7);  // awkward budget
}

TEST(AttentionCuda, SelectsAtTheLongestContext) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t nblocks = 65536;  // 262,144 tokens: every warp of the selection walks many ids
  ExpectSameSelection(b, Normal(nblocks * 128, 7), nblocks, {262143, 131074}, 512);
}

TEST(AttentionCuda, TiedScoresTakeTheLowestBlockIds) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t nblocks = 700;
  std::vector<float> same(nblocks * 128);
  const std::vector<float> row = Normal(128, 6);
  for (int64_t i = 0; i < nblocks; ++i) std::copy(row.begin(), row.end(), same.begin() + i * 128);
  ExpectSameSelection(b, same, nblocks, {2799, 1000}, 512);
  // Five distinct keys over 20,000 blocks: the ties at the cut straddle every warp's ids.
  const int64_t many = 20000;
  const std::vector<float> rows = Normal(5 * 128, 8);
  std::vector<float> few(many * 128);
  for (int64_t i = 0; i < many; ++i) std::copy_n(rows.begin() + (i * 7 % 5) * 128, 128, few.begin() + i * 128);
  ExpectSameSelection(b, few, many, {79999, 40000}, 512);
}

// One query at a time (IndexerSelect at T = 1 over 8,192 pooled blocks or more: one kernel with
// grid-wide barriers on the GPU) against the CPU and, id for id, against the two kernels of the other route (cuda::IndexerSelect):
// dense (every visible block fits), just past the budget, 3,000 to 131,072 visible blocks (past
// one 32-id step of a warp on the H200's grid), an awkward budget, the cut inside thousands of
// tied keys with higher keys spread over the whole range (so blocks and warps after the last tie
// taken still hold keys above the cut), and all scores equal. Then one graph recorded at one
// position and replayed at others (the position is read on the device): the same selections as
// eager calls, one kernel in the graph.
TEST(AttentionCuda, SelectsForOneQueryInOneKernel) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  const int64_t heads = 4, di = 128, ratio = 4, nblocks = 131072;
  // From block 40,000 on, five keys in turn; the first is the query's head 0 itself, which
  // outscores every random key, so past 160,000 positions the cut falls inside its thousands of
  // copies. Every 150th block holds twice that key, above the cut.
  const std::vector<float> q = Normal(heads * di, 13);
  std::vector<float> pooled_host = Normal(nblocks * di, 11), rows = Normal(5 * di, 12);
  std::copy_n(q.begin(), di, rows.begin());
  for (int64_t i = 40000; i < nblocks; ++i) std::copy_n(rows.begin() + (i * 7 % 5) * di, di, pooled_host.begin() + i * di);
  for (int64_t i = 75; i < nblocks; i += 150) {
    for (int64_t c = 0; c < di; ++c) pooled_host[i * di + c] = 2.0f * q[c];
  }
  auto pooled = b.Act(pooled_host, {nblocks, di});
  const int64_t flat_blocks = 8192;  // the fewest that take the one kernel
  std::vector<float> same(flat_blocks * di);
  for (int64_t i = 0; i < flat_blocks; ++i) std::copy_n(rows.begin() + di, di, same.begin() + i * di);
  auto flat = b.Act(same, {flat_blocks, di});
  auto iq = b.Act(q, {1, heads, di});
  const auto select = [&](cuda_test::Twin& keys, int64_t pos, int64_t max_blocks) {
    const std::string at = "position " + std::to_string(pos) + ", budget " + std::to_string(max_blocks);
    auto p = b.Raw(&pos, DType::kI64, {1});
    auto sel = b.Out({1, max_blocks}, DType::kI32), two = b.Out({1, max_blocks}, DType::kI32);
    b.cpu().IndexerSelect(iq.cpu.t(), keys.cpu.t(), p.cpu.t(), sel.cpu.t(), ratio);
    b.gpu().IndexerSelect(iq.gpu.t(), keys.gpu.t(), p.gpu.t(), sel.gpu.t(), ratio);
    const std::vector<int32_t> got = b.GpuInts(sel);
    EXPECT_EQ(got, b.CpuInts(sel)) << at;
    const int64_t visible = keys.gpu.t().dim(0);
    Buffer scores = b.gpu().Alloc(DType::kF32, {visible});
    cuda::IndexerSelect(static_cast<const __half*>(iq.gpu.t().data), static_cast<const __half*>(keys.gpu.t().data),
                        static_cast<const int64_t*>(p.gpu.t().data), static_cast<int32_t*>(two.gpu.t().data),
                        static_cast<float*>(scores.t().data), 1, heads, di, ratio, max_blocks, visible,
                        b.gpu().stream());
    EXPECT_EQ(got, b.GpuInts(two)) << "against the two kernels, " << at;
  };
  for (int64_t pos : {int64_t{3}, int64_t{2047}, int64_t{2051}, int64_t{11999}, int64_t{159999}, int64_t{200001},
                      int64_t{262143}, int64_t{524287}}) {
    select(pooled, pos, 512);
  }
  select(pooled, 900, 7);
  select(pooled, 262143, 1000);
  select(flat, 2799, 512);

  const int64_t max_blocks = 512;
  int64_t pos = 8191;
  auto p = b.Raw(&pos, DType::kI64, {1});
  auto sel = b.Out({1, max_blocks}, DType::kI32);
  auto graph = b.gpu().Capture([&]() -> absl::Status {
    b.gpu().IndexerSelect(iq.gpu.t(), pooled.gpu.t(), p.gpu.t(), sel.gpu.t(), ratio);
    return absl::OkStatus();
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(b.gpu().captured_kernels(), 1) << "the selection as one kernel";
  for (int64_t at : {int64_t{8191}, int64_t{262143}, int64_t{100}, int64_t{45000}}) {
    b.gpu().CopyFromHost(&at, p.gpu.t());
    ASSERT_TRUE((*graph)->Replay().ok()) << at;
    const std::vector<int32_t> replayed = b.GpuInts(sel);
    auto eager = b.Out({1, max_blocks}, DType::kI32);
    b.gpu().IndexerSelect(iq.gpu.t(), pooled.gpu.t(), p.gpu.t(), eager.gpu.t(), ratio);
    EXPECT_EQ(replayed, b.GpuInts(eager)) << "replayed at position " << at;
  }
}

// Random ascending block ids below each query's visible count, −1 padded.
std::vector<int32_t> RandomSelection(const std::vector<int64_t>& pos, int64_t ratio, int64_t max_blocks) {
  std::mt19937 rng(7);
  std::vector<int32_t> sel;
  for (int64_t p : pos) {
    const int64_t nb = (p + 1) / ratio;
    std::vector<int32_t> ids(nb);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(std::min(nb, max_blocks));
    std::sort(ids.begin(), ids.end());
    ids.resize(max_blocks, -1);
    sel.insert(sel.end(), ids.begin(), ids.end());
  }
  return sel;
}

void ExpectSameAttention(BackendPair& b, int64_t Hq, int64_t Hkv, int64_t dh, int64_t max_blocks,
                         const std::vector<int64_t>& pos, int64_t ctx) {
  const int64_t T = static_cast<int64_t>(pos.size()), ratio = 4;
  auto q = b.Act(Normal(T * Hq * dh, 8), {T, Hq, dh});
  auto k = b.Act(Normal(ctx * Hkv * dh, 9), {ctx, Hkv, dh});
  auto v = b.Act(Normal(ctx * Hkv * dh, 10), {ctx, Hkv, dh});
  const std::vector<int32_t> sel_host = RandomSelection(pos, ratio, max_blocks);
  auto sel = b.Raw(sel_host.data(), DType::kI32, {T, max_blocks});
  auto p = b.Raw(pos.data(), DType::kI64, {T});
  auto o = b.Out({T, Hq, dh});
  b.cpu().SelectedAttention(q.cpu.t(), k.cpu.t(), v.cpu.t(), sel.cpu.t(), p.cpu.t(), o.cpu.t(), ratio);
  b.gpu().SelectedAttention(q.gpu.t(), k.gpu.t(), v.gpu.t(), sel.gpu.t(), p.gpu.t(), o.gpu.t(), ratio);
  EXPECT_TRUE(b.Matches(o, 2)) << "T " << T << " Hq " << Hq << " dh " << dh;

  // Gated (the gate in the merge where there is one): against the CPU, and bitwise against the
  // GPU's attention followed by SigmoidMul.
  auto gate = b.Act(Normal(T * Hq * dh, 14), {T, Hq * dh});
  auto gated = b.Out({T, Hq, dh});
  b.cpu().GatedSelectedAttention(q.cpu.t(), k.cpu.t(), v.cpu.t(), sel.cpu.t(), p.cpu.t(), gate.cpu.t(), gated.cpu.t(),
                                 ratio);
  b.gpu().GatedSelectedAttention(q.gpu.t(), k.gpu.t(), v.gpu.t(), sel.gpu.t(), p.gpu.t(), gate.gpu.t(), gated.gpu.t(),
                                 ratio);
  EXPECT_TRUE(b.Matches(gated, 4)) << "gated, T " << T << " Hq " << Hq << " dh " << dh;
  Tensor flat = o.gpu.t().Reshaped({T, Hq * dh});
  b.gpu().SigmoidMul(flat, gate.gpu.t());
  EXPECT_EQ(b.GpuFloats(gated), b.GpuFloats(o)) << "gated against SigmoidMul after, T " << T << " Hq " << Hq;
}

TEST(AttentionCuda, DecodeSplitsTheContext) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  ExpectSameAttention(b, 24, 2, 256, 512, {8190}, 8192);   // TP1, sparse
  ExpectSameAttention(b, 12, 1, 256, 512, {1500}, 2048);   // TP2, dense
  ExpectSameAttention(b, 8, 2, 32, 4, {0}, 16);            // the first token attends only itself
  ExpectSameAttention(b, 6, 1, 256, 512, {8191}, 8192);    // TP4: no tail, every split whole
  ExpectSameAttention(b, 16, 1, 128, 64, {300, 2, 257}, 512);  // three queries, a full group of 16
  ExpectSameAttention(b, 2, 2, 64, 8, {37, 5}, 64);            // a group of one
  ExpectSameAttention(b, 32, 1, 64, 8, {40, 33}, 64);          // a group past 16: the query-head kernel
}

TEST(AttentionCuda, PrefillGroupsQueryHeadsOnTensorCores) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  std::vector<int64_t> pos(40);
  std::iota(pos.begin(), pos.end(), 2100);
  ExpectSameAttention(b, 24, 2, 256, 512, pos, 2200);  // TP1, sparse: groups of 12
  ExpectSameAttention(b, 6, 1, 256, 512, pos, 2200);   // TP4: one KV head per rank
  std::vector<int64_t> tiny(20);
  std::iota(tiny.begin(), tiny.end(), 0);
  ExpectSameAttention(b, 8, 2, 32, 4, tiny, 32);
  std::vector<int64_t> small(37);
  std::iota(small.begin(), small.end(), 90);
  ExpectSameAttention(b, 4, 2, 64, 8, small, 160);      // the small model's heads, sparse
  ExpectSameAttention(b, 16, 1, 128, 8, small, 160);    // a full group of 16
  ExpectSameAttention(b, 2, 2, 64, 8, small, 160);      // a group of one
  std::vector<int64_t> first(17);
  std::iota(first.begin(), first.end(), 0);
  ExpectSameAttention(b, 4, 2, 64, 8, first, 17);        // 17 queries: the fewest that take it
}

TEST(AttentionCuda, PrefillGroupsPastSixteenTakeTheQueryKernel) {
  Q38_REQUIRE_GPU();
  BackendPair b;
  std::vector<int64_t> pos(24);
  std::iota(pos.begin(), pos.end(), 50);
  ExpectSameAttention(b, 32, 1, 64, 8, pos, 100);
}

}  // namespace
}  // namespace q38
