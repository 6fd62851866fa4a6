// Tests of the QSA indexer and attention on the selected set (docs/model.md §8.2–8.3): pooling by
// hand and by a naive pool→norm→rotate, block selection with crafted scores and ties, and
// attention as an explicit softmax over hand-built token lists.
#include "kernels/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::AllClose;

constexpr float kEps = 1e-6f;

// ---------------------------------------------------------------------------------------------
// Naive references

// Pooled, normed, rotated key of block b, in double: mean of `ratio` raw keys, zero-centred
// RMSNorm, NeoX RoPE on the first rd dims at position b·ratio.
std::vector<double> NaivePooled(const std::vector<float>& raw, const std::vector<float>& w, int64_t b,
                                int64_t di, int64_t ratio, int64_t rd, double theta) {
  std::vector<double> m(di, 0.0);
  for (int64_t r = 0; r < ratio; ++r)
    for (int64_t c = 0; c < di; ++c) m[c] += raw[(b * ratio + r) * di + c] / static_cast<double>(ratio);
  double ms = 0;
  for (double x : m) ms += x * x / di;
  for (int64_t c = 0; c < di; ++c) m[c] = m[c] / std::sqrt(ms + kEps) * (1.0 + w[c]);
  const int64_t half = rd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float freq = static_cast<float>(std::pow(theta, -2.0 * i / rd));
    const double phi = static_cast<float>(b * ratio) * freq;
    const double x0 = m[i], x1 = m[i + half];
    m[i] = x0 * std::cos(phi) - x1 * std::sin(phi);
    m[i + half] = x1 * std::cos(phi) + x0 * std::sin(phi);
  }
  return m;
}

// Softmax attention of one query head over an explicit token list, in double.
std::vector<double> NaiveAttend(const float* qh, const std::vector<int64_t>& tokens, const std::vector<float>& k,
                                const std::vector<float>& v, int64_t kvh, int64_t Hkv, int64_t dh) {
  std::vector<double> s(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    double dot = 0;
    for (int64_t c = 0; c < dh; ++c) dot += static_cast<double>(qh[c]) * k[(tokens[i] * Hkv + kvh) * dh + c];
    s[i] = dot / std::sqrt(static_cast<double>(dh));
  }
  const double mx = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (double& x : s) z += x = std::exp(x - mx);
  std::vector<double> o(dh, 0.0);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int64_t c = 0; c < dh; ++c) o[c] += s[i] / z * v[(tokens[i] * Hkv + kvh) * dh + c];
  return o;
}

// ---------------------------------------------------------------------------------------------
// IndexerPoolBlocks

TEST(IndexerPoolBlocks, HandComputed) {
  // di = 4, ratio 4, rotary_dim 2 (one pair (0,1) with θ₀ = 1).
  // Block 0 (position 0, no rotation): keys (1,2,3,4), (3,2,1,0), (1,2,3,4), (3,2,1,0)
  //   mean (2,2,2,2), rms = sqrt(4 + 1e-6) ≈ 2 → (1,1,1,1); w = (0, .5, −.5, 1) → (1, 1.5, .5, 2).
  // Block 1 (position 4): all four keys (1,0,0,0): mean (1,0,0,0), rms = sqrt(1/4 + 1e-6) =
  //   0.5000010 → (1.9999960, 0, 0, 0), w = 0 on dims 0,1; rotated by 4 rad:
  //   1.9999960·(cos 4, sin 4) = 1.9999960·(−0.6536436, −0.7568025) = (−1.3072846, −1.5136020).
  std::vector<float> raw = {1, 2, 3, 4, 3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1, 0};
  for (int r = 0; r < 4; ++r) raw.insert(raw.end(), {1, 0, 0, 0});
  const std::vector<float> w = {0, 0.5f, -0.5f, 1};
  std::vector<float> pooled(2 * 4, NAN);
  IndexerPoolBlocks(raw.data(), w.data(), pooled.data(), 0, 2, 4, 4, kEps, 2, 1e7);
  const double want[8] = {1, 1.5, 0.5, 2, -1.3072846, -1.5136020, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(pooled[i], want[i], 1e-6) << i;
}

TEST(IndexerPoolBlocks, MatchesNaiveAndWritesOnlyItsRows) {
  const int64_t di = 16, ratio = 4, rd = 8, blocks = 6, first = 2, count = 3;
  const double theta = 1e7;
  const std::vector<float> raw = Uniform(blocks * ratio * di, 401, -2, 2);
  const std::vector<float> w = Uniform(di, 402, -0.3f, 0.3f);
  std::vector<float> pooled(blocks * di, 777.0f);
  for (int64_t i = first * di; i < (first + count) * di; ++i) pooled[i] = NAN;
  IndexerPoolBlocks(raw.data(), w.data(), pooled.data(), first, count, di, ratio, kEps, rd, theta);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b < first || b >= first + count) {
      for (int64_t c = 0; c < di; ++c) EXPECT_EQ(pooled[b * di + c], 777.0f) << b;
      continue;
    }
    const std::vector<float> got(pooled.begin() + b * di, pooled.begin() + (b + 1) * di);
    EXPECT_TRUE(AllClose(got, NaivePooled(raw, w, b, di, ratio, rd, theta), 1e-5)) << "block " << b;
  }
}

// ---------------------------------------------------------------------------------------------
// IndexerSelect

std::vector<int32_t> SelectOne(const std::vector<float>& iq, const std::vector<float>& pooled, int64_t pos,
                               int64_t heads, int64_t di, int64_t max_blocks) {
  std::vector<int32_t> sel(max_blocks, 12345);
  IndexerSelect(iq.data(), pooled.data(), &pos, sel.data(), 1, heads, di, 4, max_blocks);
  return sel;
}

TEST(IndexerSelect, AllVisibleBlocksWhenWithinBudget) {
  // nb = ⌊(p+1)/4⌋ ≤ budget: every complete visible block, ascending, then −1.
  const int64_t di = 4, max_blocks = 5;
  const std::vector<float> pooled = Uniform(8 * di, 410), iq = Uniform(di, 411);
  struct Case { int64_t pos; std::vector<int32_t> want; };
  const Case cases[] = {
      {0, {-1, -1, -1, -1, -1}},   // n = 1: no complete block (the token is the tail)
      {2, {-1, -1, -1, -1, -1}},   // n = 3
      {3, {0, -1, -1, -1, -1}},    // n = 4: block 0 complete
      {10, {0, 1, -1, -1, -1}},    // n = 11: blocks 0,1; tokens 8..10 are the tail
      {19, {0, 1, 2, 3, 4}},       // n = 20: nb = 5 = budget, all selected (dense)
  };
  for (const Case& c : cases) EXPECT_EQ(SelectOne(iq, pooled, c.pos, 1, di, max_blocks), c.want) << c.pos;
}

TEST(IndexerSelect, CraftedScoresPickTheExpectedBlocks) {
  // heads 1, di 2, iq = (1, 0): score_b = relu(pooled_b[0]) / sqrt(2).
  // pooled_b[0] = (0.1, 0.9, −5, 0.5, 0.8, 0.3), p = 23 → nb = 6, budget 3:
  //   top 3 = b1 (0.9), b4 (0.8), b3 (0.5) → ascending {1, 3, 4}.
  const std::vector<float> iq = {1, 0};
  const std::vector<float> pooled = {0.1f, 0, 0.9f, 0, -5, 0, 0.5f, 0, 0.8f, 0, 0.3f, 0};
  EXPECT_EQ(SelectOne(iq, pooled, 23, 1, 2, 3), (std::vector<int32_t>{1, 3, 4}));
  // Budget 1: the single best.
  EXPECT_EQ(SelectOne(iq, pooled, 23, 1, 2, 1), (std::vector<int32_t>{1}));
}

TEST(IndexerSelect, TiesGoToTheLowerBlockId) {
  // pooled_b[0] = (0.5, 0.9, 0.5, 0.5, 0.2), budget 2, p = 19 (nb 5): b1 wins, then the tie
  // among b0, b2, b3 goes to b0 → {0, 1}.
  const std::vector<float> iq = {1, 0};
  const std::vector<float> pooled = {0.5f, 0, 0.9f, 0, 0.5f, 0, 0.5f, 0, 0.2f, 0};
  EXPECT_EQ(SelectOne(iq, pooled, 19, 1, 2, 2), (std::vector<int32_t>{0, 1}));
  // Budget 3: b1, then b0 and b2 of the three-way tie.
  EXPECT_EQ(SelectOne(iq, pooled, 19, 1, 2, 3), (std::vector<int32_t>{0, 1, 2}));
  // All scores negative → relu makes them all 0: a full tie, the lowest ids win.
  const std::vector<float> neg = {-1, 0, -2, 0, -3, 0, -4, 0, -5, 0};
  EXPECT_EQ(SelectOne(iq, neg, 19, 1, 2, 2), (std::vector<int32_t>{0, 1}));
}

TEST(IndexerSelect, ReluIsPerHeadBeforeTheSum) {
  // heads 2, di 2: iq head 0 = (1, 0), head 1 = (0, 1); score_b ∝ relu(x_b) + relu(y_b).
  //   b0 = (2, −10) → 2     (a plain sum of dots would give −8)
  //   b1 = (1, 1)   → 2
  //   b2 = (−1, 1.5)→ 1.5   (plain: 0.5)
  //   b3 = (0.5, .5)→ 1     (plain: 1)
  // budget 2, p = 15 (nb 4): relu per head → {0, 1}; relu of the sum would give {1, 3}.
  const std::vector<float> iq = {1, 0, 0, 1};
  const std::vector<float> pooled = {2, -10, 1, 1, -1, 1.5f, 0.5f, 0.5f};
  EXPECT_EQ(SelectOne(iq, pooled, 15, 2, 2, 2), (std::vector<int32_t>{0, 1}));
}

TEST(IndexerSelect, OnlyCompleteVisibleBlocksCompete) {
  // Two queries (prefill): p = 18 (nb 4) and p = 23 (nb 6). Block 5 has the best score but
  // is not visible to the first query; block 4 is incomplete for it (tokens 16..18 are tail).
  const std::vector<float> iq = {1, 0, 1, 0};  // T = 2, heads 1, di 2
  const std::vector<float> pooled = {0.1f, 0, 0.2f, 0, 0.3f, 0, 0.4f, 0, 0.5f, 0, 9.0f, 0};
  const int64_t pos[2] = {18, 23};
  std::vector<int32_t> sel(2 * 2, 12345);
  IndexerSelect(iq.data(), pooled.data(), pos, sel.data(), 2, 1, 2, 4, 2);
  EXPECT_EQ(sel, (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(IndexerSelect, MatchesNaiveTopKOnRandomScores) {
  // Independent: score every visible block in double, sort by (score desc, id asc), keep the
  // budget, sort ascending.
  const int64_t heads = 4, di = 16, budget = 7, ctx = 103;
  const int64_t nblocks = ctx / 4;
  const std::vector<float> pooled = Uniform(nblocks * di, 420, -1, 1);
  const int64_t pos[3] = {27, 70, 102};
  const std::vector<float> iq = Uniform(3 * heads * di, 421, -1, 1);
  std::vector<int32_t> sel(3 * budget, 12345);
  IndexerSelect(iq.data(), pooled.data(), pos, sel.data(), 3, heads, di, 4, budget);
  for (int t = 0; t < 3; ++t) {
    const int64_t nb = (pos[t] + 1) / 4;
    std::vector<std::pair<double, int32_t>> scored;
    for (int64_t b = 0; b < nb; ++b) {
      double s = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t c = 0; c < di; ++c) dot += static_cast<double>(iq[(t * heads + h) * di + c]) * pooled[b * di + c];
        s += std::max(dot, 0.0);
      }
      scored.push_back({-s / std::sqrt(static_cast<double>(di)), static_cast<int32_t>(b)});
    }
    std::sort(scored.begin(), scored.end());
    std::vector<int32_t> want;
    for (int64_t i = 0; i < std::min<int64_t>(budget, nb); ++i) want.push_back(scored[i].second);
    std::sort(want.begin(), want.end());
    want.resize(budget, -1);
    EXPECT_EQ(std::vector<int32_t>(sel.begin() + t * budget, sel.begin() + (t + 1) * budget), want) << pos[t];
  }
}

// ---------------------------------------------------------------------------------------------
// SelectedAttention

TEST(SelectedAttention, HandComputedTwoTokens) {
  // One head, dh = 4 (scale 1/2), p = 1: no complete block, both tokens are the tail.
  //   q = (2,0,0,0); k0 = 0 → score 0; k1 = (1,0,0,0) → score 2·1/2 = 1.
  //   softmax = (1, e)/(1 + e) = (0.2689414, 0.7310586); v0 = e₀, v1 = e₁ → o = (0.2689414, 0.7310586, 0, 0).
  const std::vector<float> q = {2, 0, 0, 0};
  const std::vector<float> k = {0, 0, 0, 0, 1, 0, 0, 0}, v = {1, 0, 0, 0, 0, 1, 0, 0};
  const int32_t sel[1] = {-1};
  const int64_t pos = 1;
  std::vector<float> o(4, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &pos, o.data(), 1, {1, 1, 4, 4, 1});
  EXPECT_NEAR(o[0], 0.2689414, 1e-6);
  EXPECT_NEAR(o[1], 0.7310586, 1e-6);
  EXPECT_EQ(o[2], 0.0f);
  EXPECT_EQ(o[3], 0.0f);
}

TEST(SelectedAttention, AllSelectedEqualsDenseCausalPrefill) {
  // Prefill of ctx tokens, every query at its own position with every visible complete block
  // selected (built by hand, not by IndexerSelect): must equal dense causal attention, and must
  // not read keys after the query's position (the cache holds all ctx of them).
  const AttentionDims d{4, 2, 8, 4, 8};
  const int64_t ctx = 23;
  const std::vector<float> q = Uniform(ctx * d.q_heads * d.head_dim, 430, -2, 2);
  const std::vector<float> k = Uniform(ctx * d.kv_heads * d.head_dim, 431, -2, 2);
  const std::vector<float> v = Uniform(ctx * d.kv_heads * d.head_dim, 432, -2, 2);
  std::vector<int64_t> pos(ctx);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int32_t> sel(ctx * d.max_blocks, -1);
  for (int64_t t = 0; t < ctx; ++t)
    for (int64_t b = 0; b < (t + 1) / 4; ++b) sel[t * d.max_blocks + b] = static_cast<int32_t>(b);
  std::vector<float> o(ctx * d.q_heads * d.head_dim, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel.data(), pos.data(), o.data(), ctx, d);
  std::vector<double> want;
  for (int64_t t = 0; t < ctx; ++t) {
    std::vector<int64_t> tokens(t + 1);
    std::iota(tokens.begin(), tokens.end(), 0);  // dense causal: 0..t
    for (int64_t h = 0; h < d.q_heads; ++h) {
      const std::vector<double> oh = NaiveAttend(&q[(t * d.q_heads + h) * d.head_dim], tokens, k, v,
                                                 h / 2, d.kv_heads, d.head_dim);
      want.insert(want.end(), oh.begin(), oh.end());
    }
  }
  EXPECT_TRUE(AllClose(o, want, 1e-5));
}

TEST(SelectedAttention, SparseSelectionAttendsExactlyTheListedTokens) {
  // p = 22 (n = 23, nb = 5), selected blocks {1, 3}: tokens {4..7, 12..15} ∪ tail {20, 21, 22}.
  const AttentionDims d{2, 1, 8, 4, 3};
  const int64_t ctx = 23, p = 22;
  const std::vector<float> q = Uniform(d.q_heads * d.head_dim, 440, -3, 3);
  std::vector<float> k = Uniform(ctx * d.head_dim, 441, -2, 2);
  std::vector<float> v = Uniform(ctx * d.head_dim, 442, -2, 2);
  const int32_t sel[3] = {1, 3, -1};
  std::vector<float> o(d.q_heads * d.head_dim, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &p, o.data(), 1, d);
  const std::vector<int64_t> tokens = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22};
  std::vector<double> want;
  for (int64_t h = 0; h < d.q_heads; ++h) {
    const std::vector<double> oh = NaiveAttend(&q[h * d.head_dim], tokens, k, v, 0, 1, d.head_dim);
    want.insert(want.end(), oh.begin(), oh.end());
  }
  EXPECT_TRUE(AllClose(o, want, 1e-5));
  // Tokens outside the list do not matter: scramble them and get bit-identical output.
  for (int64_t tok : {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19}) {
    for (int64_t c = 0; c < d.head_dim; ++c) k[tok * d.head_dim + c] = v[tok * d.head_dim + c] = 50.0f;
  }
  std::vector<float> o2(o.size(), NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &p, o2.data(), 1, d);
  EXPECT_EQ(o2, o);
}

TEST(SelectedAttention, OwnTokenNotForcedWhenItsBlockIsComplete) {
  // docs/model.md §16.1: p = 7 (n = 8, a multiple of 4) has no tail; with sel = {0} only tokens 0..3
  // are attended, the current token included in none of them.
  const AttentionDims d{1, 1, 4, 4, 1};
  const std::vector<float> q = Uniform(4, 450);
  std::vector<float> k = Uniform(8 * 4, 451), v = Uniform(8 * 4, 452);
  const int32_t sel[1] = {0};
  const int64_t p = 7;
  std::vector<float> o(4, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &p, o.data(), 1, d);
  const std::vector<double> want = NaiveAttend(q.data(), {0, 1, 2, 3}, k, v, 0, 1, 4);
  EXPECT_TRUE(AllClose(o, want, 1e-5));
}

TEST(SelectedAttention, QueryHeadsMapToKvHeadsByGroup) {
  // Hq = 4, Hkv = 2 (group 2): identical query heads 0..3; heads 0,1 read kv 0 and 2,3 kv 1.
  const AttentionDims d{4, 2, 4, 4, 1};
  std::vector<float> q;
  const std::vector<float> q0 = Uniform(4, 460);
  for (int h = 0; h < 4; ++h) q.insert(q.end(), q0.begin(), q0.end());
  const std::vector<float> k = Uniform(3 * 2 * 4, 461), v = Uniform(3 * 2 * 4, 462);
  const int32_t sel[1] = {-1};
  const int64_t p = 2;
  std::vector<float> o(16, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &p, o.data(), 1, d);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(o[0 * 4 + c], o[1 * 4 + c]);
    EXPECT_EQ(o[2 * 4 + c], o[3 * 4 + c]);
  }
  const std::vector<double> kv1 = NaiveAttend(q0.data(), {0, 1, 2}, k, v, 1, 2, 4);
  EXPECT_TRUE(AllClose(std::vector<float>(o.begin() + 8, o.begin() + 12), kv1, 1e-5));
}

TEST(SelectedAttention, LargeScoresStayFinite) {
  // Scores of ±1e4: the max-subtracted softmax picks the largest without overflow.
  const AttentionDims d{1, 1, 4, 4, 1};
  const std::vector<float> q = {200, 0, 0, 0};
  const std::vector<float> k = {100, 0, 0, 0, -100, 0, 0, 0, 99, 0, 0, 0};  // scores 1e4, −1e4, 9900
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const int32_t sel[1] = {-1};
  const int64_t p = 2;
  std::vector<float> o(4, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel, &p, o.data(), 1, d);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(o[c], 1.0f + c, 1e-6);  // e^−100 of the next one
}

TEST(QsaPipeline, PoolSelectAttendMatchesNaiveSparseAttention) {
  // Pool every block, select with a budget smaller than the visible blocks, attend; against a
  // naive pipeline in double: pooled keys, scores, top-k, explicit token list, softmax.
  const int64_t di = 16, rd = 8, ratio = 4, budget = 3, ctx = 30, heads_i = 2;
  const AttentionDims d{2, 1, 8, ratio, budget};
  const double theta = 1e7;
  const std::vector<float> raw = Uniform(ctx * di, 470, -1, 1), knorm = Uniform(di, 471, -0.2f, 0.2f);
  const std::vector<float> iq = Uniform(heads_i * di, 472, -1, 1);
  const std::vector<float> q = Uniform(d.q_heads * d.head_dim, 473, -2, 2);
  const std::vector<float> k = Uniform(ctx * d.head_dim, 474, -2, 2), v = Uniform(ctx * d.head_dim, 475, -2, 2);
  const int64_t p = ctx - 1, nb = ctx / ratio;  // nb = 7 > budget; tail tokens 28, 29

  std::vector<float> pooled(nb * di, NAN);
  IndexerPoolBlocks(raw.data(), knorm.data(), pooled.data(), 0, nb, di, ratio, kEps, rd, theta);
  std::vector<int32_t> sel(budget, 12345);
  IndexerSelect(iq.data(), pooled.data(), &p, sel.data(), 1, heads_i, di, ratio, budget);
  std::vector<float> o(d.q_heads * d.head_dim, NAN);
  SelectedAttention(q.data(), k.data(), v.data(), sel.data(), &p, o.data(), 1, d);

  std::vector<std::pair<double, int64_t>> scored;
  for (int64_t b = 0; b < nb; ++b) {
    const std::vector<double> kb = NaivePooled(raw, knorm, b, di, ratio, rd, theta);
    double s = 0;
    for (int64_t h = 0; h < heads_i; ++h) {
      double dot = 0;
      for (int64_t c = 0; c < di; ++c) dot += iq[h * di + c] * kb[c];
      s += std::max(dot, 0.0);
    }
    scored.push_back({-s, b});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < budget; ++i)
    for (int64_t r = 0; r < ratio; ++r) tokens.push_back(scored[i].second * ratio + r);
  tokens.push_back(28);
  tokens.push_back(29);
  std::vector<double> want;
  for (int64_t h = 0; h < d.q_heads; ++h) {
    const std::vector<double> oh = NaiveAttend(&q[h * d.head_dim], tokens, k, v, 0, 1, d.head_dim);
    want.insert(want.end(), oh.begin(), oh.end());
  }
  EXPECT_TRUE(AllClose(o, want, 1e-5));
}

}  // namespace
}  // namespace q38::cpu
