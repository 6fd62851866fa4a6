// Tests of the PLE ops (docs/model.md §6, §15): the n-gram hash constants and rows against the
// exact §17 vectors and an independent implementation of the §6.2 rule, the table gather for
// each storage dtype from hand-built bytes, and the per-stream gate by hand.
#include "kernels/ple/ple.h"
#include "kernels/ple/ple_hash.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace q38 {
namespace {

constexpr int64_t kEos = 248044;

// The release parameters (docs/model.md §1.1).
PleHashParams ReleaseParams() {
  PleHashParams p;
  p.vocab_size = 248320;
  p.ngram_size = 3;
  p.heads_per_ngram = 8;
  p.vocab_base = 20000000;
  p.divisor = 128;
  p.seed = 1234;
  p.layer_index = 0;
  return p;
}

// docs/model.md §15 / §6.1 constants, written out literally.
const std::vector<int64_t> kMultipliers = {23703573157769, 20109073645365, 8052911324071};
const std::vector<int64_t> kSizes = {20000003, 20000023, 20000033, 20000047, 20000059, 20000063,
                                     20000069, 20000077, 20000081, 20000093, 20000107, 20000147,
                                     20000153, 20000159, 20000161, 20000171};
const std::vector<int64_t> kOffsets = {0,         20000003,  40000026,  60000059,  80000106,  100000165,
                                       120000228, 140000297, 160000374, 180000455, 200000548, 220000655,
                                       240000802, 260000955, 280001114, 300001275};

// docs/model.md §15: the 16 rows of each token of [9707, 11, 1879, 248044, 42] at sequence start.
const std::vector<int32_t> kSequence = {9707, 11, 1879, 248044, 42};
const int64_t kSequenceRows[5][16] = {
    // (9707, 248044, 248044)
    {16410909, 39682429, 55103279, 60931720, 87006904, 116506179, 131512017, 152932897, 169641436,
     182022480, 209277433, 237891023, 256841529, 277007269, 290665954, 300984276},
    // (11, 9707, 248044)
    {18158303, 36390029, 45652312, 70783524, 98191154, 114024957, 127804916, 159566246, 175132467,
     192583600, 217919476, 237199054, 259336807, 261799367, 289359313, 307699687},
    // (1879, 11, 9707)
    {6380558, 26411572, 56460672, 78566983, 94693008, 106742196, 124822692, 148942556, 164226950,
     190352573, 210933682, 238908951, 242182004, 265475238, 299910982, 312121804},
    // (248044, 1879, 11)
    {18827606, 27700912, 56521518, 65780303, 81132822, 100518937, 120474864, 142052741, 163793416,
     184135950, 219854666, 227756662, 248975183, 271245822, 285569892, 318943450},
    // (42, 248044, 248044)
    {4064167, 21428206, 43851727, 63435096, 89826284, 106088217, 121229381, 156147803, 175176707,
     188463481, 216828809, 228933352, 248448227, 269188956, 283041664, 314347972},
};

// §6.2 written straight from the text, over the whole sequence (no carried history):
// u_s = t[p−s] if p−s ≥ 0 and none of t[p−s..p−1] is EOS, else EOS; h2 = u0·m0 ^ u1·m1,
// h3 = h2 ^ u2·m2; row[h] = h2 mod size + offset (h < 8), h3 for the trigram heads.
std::vector<int64_t> NaiveRows(const std::vector<int32_t>& ids) {
  std::vector<int64_t> rows;
  for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); ++p) {
    int64_t u[3] = {ids[p], kEos, kEos};
    for (int64_t s = 1; s <= 2; ++s) {
      bool ok = p - s >= 0;
      for (int64_t q = p - s; ok && q < p; ++q) ok = ids[q] != kEos;
      if (ok) u[s] = ids[p - s];
    }
    const int64_t h2 = (u[0] * kMultipliers[0]) ^ (u[1] * kMultipliers[1]);
    const int64_t h3 = h2 ^ (u[2] * kMultipliers[2]);
    for (int h = 0; h < 8; ++h) rows.push_back(h2 % kSizes[h] + kOffsets[h]);
    for (int h = 0; h < 8; ++h) rows.push_back(h3 % kSizes[8 + h] + kOffsets[8 + h]);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Hash constants

TEST(PleHash, SplitMix64KnownOutputs) {
  // The standard SplitMix64 stream seeded with 0: the function adds GAMMA first, so
  // SplitMix64(k·GAMMA) is the (k+1)-th output.
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(kGamma), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(2 * kGamma), 0x06C45D188009454Full);
}

TEST(PleHash, NextPrimeIsStrictlyGreater) {
  EXPECT_EQ(NextPrime(0), 2);
  EXPECT_EQ(NextPrime(2), 3);
  EXPECT_EQ(NextPrime(7), 11);
  EXPECT_EQ(NextPrime(13), 17);
  EXPECT_EQ(NextPrime(19999999), 20000003);  // base − 1 → the first head size
  EXPECT_EQ(NextPrime(20000003), 20000023);
  EXPECT_EQ(NextPrime(20000161), 20000171);
}

TEST(PleHash, ReleaseConstantsOfModelMd17) {
  const PleHash h = PleHash::Derive(ReleaseParams());
  EXPECT_EQ(h.multipliers, kMultipliers);
  EXPECT_EQ(h.head_sizes, kSizes);
  EXPECT_EQ(h.head_offsets, kOffsets);
  EXPECT_EQ(h.table_rows, 320001536);       // 320 001 446 used, padded to a multiple of 128
  EXPECT_EQ(h.table_rows, 128 * 2500012);   // 128 shards of 2 500 012 rows
  EXPECT_EQ(h.heads(), 16);
  EXPECT_EQ(h.heads_per_ngram, 8);
  // Properties the hash relies on: odd multipliers below (2⁶³−1) // vocab = 37 143 089 710 272.
  for (int64_t m : h.multipliers) {
    EXPECT_EQ(m % 2, 1);
    EXPECT_LT(m, 37143089710272);
  }
  EXPECT_EQ(h.head_offsets.back() + h.head_sizes.back(), 320001446);
}

TEST(PleHash, SecondModuleUsesTheNextSeedAndPrimes) {
  // ple_layer_index 1 (a hypothetical second PLE module): base_seed 1234 + 10007, head sizes
  // the 17th..32nd primes ≥ base. Values from an independent Python derivation of §6.1.
  PleHashParams p = ReleaseParams();
  p.layer_index = 1;
  const PleHash h = PleHash::Derive(p);
  EXPECT_EQ(h.multipliers, (std::vector<int64_t>{3352040966061, 19752442147475, 10742103100073}));
  ASSERT_EQ(h.heads(), 16);
  EXPECT_EQ(h.head_sizes[0], 20000213);  // the prime after 20000171
  EXPECT_EQ(h.head_sizes[1], 20000221);
  EXPECT_EQ(h.head_offsets[0], 0);
  EXPECT_EQ(h.table_rows, 320005120);
}

// ---------------------------------------------------------------------------------------------
// N-gram rows

TEST(NgramRows, ModelMd17Vectors) {
  const PleHash h = PleHash::Derive(ReleaseParams());
  std::vector<int64_t> history = {kEos, kEos};
  std::vector<int64_t> rows(5 * 16, -1);
  NgramRows(h, kSequence.data(), 5, kEos, history, rows.data());
  for (int t = 0; t < 5; ++t)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(rows[t * 16 + j], kSequenceRows[t][j]) << "token " << t << " head " << j;
  // The history now ends with the sequence, most recent first.
  EXPECT_EQ(history, (std::vector<int64_t>{42, kEos}));
}

TEST(NgramRows, SplittingTheSequenceAcrossCallsGivesTheSameRows) {
  const PleHash h = PleHash::Derive(ReleaseParams());
  for (int64_t split = 0; split <= 5; ++split) {
    std::vector<int64_t> history = {kEos, kEos};
    std::vector<int64_t> rows(5 * 16, -1);
    NgramRows(h, kSequence.data(), split, kEos, history, rows.data());
    NgramRows(h, kSequence.data() + split, 5 - split, kEos, history, rows.data() + split * 16);
    for (int t = 0; t < 5; ++t)
      for (int j = 0; j < 16; ++j) EXPECT_EQ(rows[t * 16 + j], kSequenceRows[t][j]) << "split " << split << " token " << t;
  }
  // Token by token (decode).
  std::vector<int64_t> history = {kEos, kEos};
  for (int t = 0; t < 5; ++t) {
    std::vector<int64_t> rows(16, -1);
    NgramRows(h, kSequence.data() + t, 1, kEos, history, rows.data());
    for (int j = 0; j < 16; ++j) EXPECT_EQ(rows[j], kSequenceRows[t][j]) << "decode token " << t;
  }
}

TEST(NgramRows, MatchesTheSection62RuleWithEosCutsAndImEnd) {
  // Only 248044 cuts the history; <|im_end|> (248046) is an ordinary token. Ids up to the
  // padded vocabulary's last id exercise the no-overflow bound.
  std::vector<int32_t> ids = {5, 248044, 7, 8, 248046, 9, 248319, 248318, 248044, 248044, 0, 1, 2};
  std::mt19937 rng(701);
  for (int i = 0; i < 40; ++i) ids.push_back(rng() % 5 == 0 ? 248044 : static_cast<int32_t>(rng() % 248320));
  const PleHash h = PleHash::Derive(ReleaseParams());
  const std::vector<int64_t> want = NaiveRows(ids);
  std::vector<int64_t> history = {kEos, kEos};
  std::vector<int64_t> rows(ids.size() * 16, -1);
  // In three uneven calls, to carry the history across EOS positions too.
  const int64_t cuts[] = {0, 2, 9, static_cast<int64_t>(ids.size())};
  for (int c = 0; c < 3; ++c)
    NgramRows(h, ids.data() + cuts[c], cuts[c + 1] - cuts[c], kEos, history, rows.data() + cuts[c] * 16);
  EXPECT_EQ(rows, want);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t head = i % 16;
    EXPECT_GE(rows[i], kOffsets[head]);
    EXPECT_LT(rows[i], kOffsets[head] + kSizes[head]);
  }
}

// ---------------------------------------------------------------------------------------------
// Table gather: the rows staged as stored, then loaded times the scale.

std::vector<float> Gather(const PleTable& table, const std::vector<int64_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()) * table.row_width;
  std::vector<uint8_t> staged(n * DTypeSize(table.dtype));
  PleStageRows(table, rows.data(), static_cast<int64_t>(rows.size()), staged.data());
  std::vector<float> E(n, NAN);
  cpu::PleLoad(staged.data(), table.dtype, table.scale, E.data(), n);
  return E;
}

TEST(PleGather, F32TableAcrossShards) {
  // Two shards of 3 rows × 2 columns; global row r holds (10r, 10r + 1). T = 2, 3 heads:
  // rows (5, 0, 3 | 2, 4, 1) → E head-major: (50,51, 0,1, 30,31 | 20,21, 40,41, 10,11).
  std::vector<float> shard0(6), shard1(6);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) {
      shard0[r * 2 + c] = 10.0f * r + c;
      shard1[r * 2 + c] = 10.0f * (r + 3) + c;
    }
  const PleTable table{{reinterpret_cast<const uint8_t*>(shard0.data()), reinterpret_cast<const uint8_t*>(shard1.data())},
                       3, DType::kF32, 2, 1.0f, {}};
  EXPECT_EQ(Gather(table, {5, 0, 3, 2, 4, 1}), (std::vector<float>{50, 51, 0, 1, 30, 31, 20, 21, 40, 41, 10, 11}));
}

TEST(PleGather, Bf16Table) {
  // One shard of 2 rows × 2: BF16 bits 0x3F80 = 1, 0xC000 = −2, 0x4040 = 3, 0x3E80 = 0.25.
  const uint16_t bits[4] = {0x3F80, 0xC000, 0x4040, 0x3E80};
  uint8_t bytes[8];
  std::memcpy(bytes, bits, sizeof(bytes));
  const PleTable table{{bytes}, 2, DType::kBF16, 2, 1.0f, {}};
  EXPECT_EQ(Gather(table, {1, 0}), (std::vector<float>{3, 0.25f, 1, -2}));
}

TEST(PleGather, Fp8TableTimesScale) {
  // Two shards of 1 row × 4, E4M3 bytes, weight_scale 0.5:
  //   row 0: 0x38 = 1, 0x40 = 2, 0xB8 = −1, 0x01 = 2⁻⁹ → (0.5, 1, −0.5, 2⁻¹⁰)
  //   row 1: 0x7E = 448, 0x00 = 0, 0x30 = 0.5, 0x3C = 1.5 → (224, 0, 0.25, 0.75)
  const uint8_t row0[4] = {0x38, 0x40, 0xB8, 0x01}, row1[4] = {0x7E, 0x00, 0x30, 0x3C};
  const PleTable table{{row0, row1}, 1, DType::kF8E4M3, 4, 0.5f, {}};
  EXPECT_EQ(Gather(table, {1, 0}), (std::vector<float>{224, 0, 0.25f, 0.75f, 0.5f, 1, -0.5f, std::ldexp(1.0f, -10)}));
}

// ---------------------------------------------------------------------------------------------
// Gate

TEST(PleGate, HandComputed) {
  // S = 4 streams of H = 4, one token, V = (1, −2, 3, 0.5); a = <Kn, Qn>/sqrt(4):
  //   s0: Kn = Qn = 1:             a = 4/2 = 2       → sqrt(2) = 1.4142136 → sigmoid 0.8044297
  //   s1: Kn = −1, Qn = 0.5:       a = −2/2 = −1     → −1                  → sigmoid 0.2689414
  //   s2: Kn = 0:                  a = 0             → sign(0) = 0         → sigmoid 0.5
  //   s3: Kn = (1e-4,0,0,0), Qn = (2e-4,0,0,0): a = 1e-8 → sqrt(max(1e-8, 1e-6)) = 1e-3 → 0.5002500
  const std::vector<float> kn = {1, 1, 1, 1, -1, -1, -1, -1, 0, 0, 0, 0, 1e-4f, 0, 0, 0};
  const std::vector<float> qn = {1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 7, 7, 7, 7, 2e-4f, 0, 0, 0};
  const std::vector<float> v = {1, -2, 3, 0.5f};
  std::vector<float> G(16, NAN);
  cpu::PleGate(kn.data(), qn.data(), v.data(), G.data(), 1, 4, 4);
  const double gate[4] = {0.8044297, 0.2689414, 0.5, 0.5002500};
  for (int s = 0; s < 4; ++s)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(G[s * 4 + c], gate[s] * v[c], 1e-6) << s << " " << c;
}

TEST(PleGate, TinyNegativeUsesSignedFloor) {
  // a = −1e-8 → −sqrt(1e-6) = −1e-3 → sigmoid 0.4997500. Two tokens, each its own V.
  const std::vector<float> kn = {-1e-4f, 0, 1, 1};
  const std::vector<float> qn = {2e-4f, 0, 1, 1};
  const std::vector<float> v = {2, 4, 1, 1};  // [T = 2, H = 2]
  std::vector<float> G(4, NAN);
  cpu::PleGate(kn.data(), qn.data(), v.data(), G.data(), 2, 1, 2);
  EXPECT_NEAR(G[0], 0.4997500 * 2, 1e-6);
  EXPECT_NEAR(G[1], 0.4997500 * 4, 1e-6);
  // Token 1: a = 2/sqrt(2) = sqrt(2) → sqrt(sqrt 2) = 1.1892071 → sigmoid 0.7665992.
  EXPECT_NEAR(G[2], 0.7665992, 1e-6);
  EXPECT_NEAR(G[3], 0.7665992, 1e-6);
}

TEST(PleGate, ModelWidthUsesSumOverSqrt2560) {
  // H = 2560, S = 4: Kn = Qn = 1 → <Kn, Qn> = 2560 (a sum, not a mean), times 1/sqrt(2560) =
  // 0.0197642 → a = 50.596443 → sqrt → 7.1131176 → sigmoid 0.9991863. V = 1.
  const int64_t S = 4, H = 2560;
  const std::vector<float> kn(S * H, 1.0f), qn(S * H, 1.0f), v(H, 1.0f);
  std::vector<float> G(S * H, NAN);
  cpu::PleGate(kn.data(), qn.data(), v.data(), G.data(), 1, S, H);
  for (int64_t i = 0; i < S * H; ++i) ASSERT_NEAR(G[i], 0.9991863, 1e-6) << i;
}

}  // namespace
}  // namespace q38
