// The agreement measures on hand-made logits: top-1, the per-position error, and where along the
// sequence the error lies.
#include "tools/precision/agreement.h"

#include <gtest/gtest.h>

#include <cmath>

namespace q38 {
namespace {

constexpr int64_t kVocab = 4;

// Six positions of reference logits, each with its top at position % kVocab.
std::vector<float> Reference() {
  std::vector<float> r(6 * kVocab, 1.0f);
  for (int64_t p = 0; p < 6; ++p) r[p * kVocab + p % kVocab] = 5.0f;
  return r;
}

TEST(Agreement, CountsTopOneAndErrors) {
  const std::vector<float> r = Reference();
  std::vector<float> g = r;
  g[4 * kVocab + 3] = 9.0f;  // position 4 picks token 3 instead of 0
  const Agreement a = CompareLogits(g, r, kVocab);
  EXPECT_EQ(a.positions, 6);
  EXPECT_DOUBLE_EQ(a.top1, 5.0 / 6);
  EXPECT_TRUE(a.finite);
  EXPECT_DOUBLE_EQ(a.final_rel_error, 0.0);
  EXPECT_DOUBLE_EQ(CompareLogits(r, r, kVocab).p90_rel_error, 0.0);
}

TEST(Agreement, ErrorAlongPositionsLocatesTheDeparture) {
  const std::vector<float> r = Reference();
  std::vector<float> g = r;
  g[4 * kVocab + 3] = 9.0f;   // ‖(0,0,0,8)‖ / ‖(5,1,1,1)‖ = 8 / √28
  g[5 * kVocab + 1] += 0.5f;  // top kept: 0.5 / √28
  EXPECT_EQ(ErrorAlongPositions(g, r, kVocab, 3),
            "0-1: max 0.0e+00, 0 misses; 2-3: max 0.0e+00, 0 misses; 4-5: max 1.5e+00, 1 misses");
  // More parts than positions: one run per position, none empty.
  EXPECT_EQ(ErrorAlongPositions(r, r, kVocab, 8).find("--"), std::string::npos);
  EXPECT_EQ(ErrorAlongPositions(g, std::vector<float>(3), kVocab, 3), "");
}

TEST(Agreement, ErrorAlongRowsLeavesTopOneOut) {
  const std::vector<float> r = Reference();
  std::vector<float> g = r;
  g[5 * kVocab + 1] += 0.5f;
  EXPECT_EQ(ErrorAlongRows(g, r, kVocab, 2), "0-2: max 0.0e+00; 3-5: max 9.4e-02");
}

TEST(Agreement, FirstDifferingRowIsBitwise) {
  const std::vector<float> r = Reference();
  EXPECT_EQ(FirstDifferingRow(r, r, kVocab), -1);
  std::vector<float> g = r;
  g[3 * kVocab + 2] = std::nextafter(g[3 * kVocab + 2], 2.0f);  // one ulp
  g[5 * kVocab] = 0;
  EXPECT_EQ(FirstDifferingRow(g, r, kVocab), 3);
  // Zero and negative zero compare equal but are not the same bits.
  std::vector<float> z(8, 0.0f), nz = z;
  nz[6] = -0.0f;
  EXPECT_EQ(FirstDifferingRow(nz, z, kVocab), 1);
  // A shorter run differs at the first row it lacks.
  EXPECT_EQ(FirstDifferingRow(std::vector<float>(r.begin(), r.begin() + 2 * kVocab), r, kVocab), 2);
}

}  // namespace
}  // namespace q38
