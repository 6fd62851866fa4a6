#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace q38 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams Params(float temperature, int top_k = 0, float top_p = 1, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

int32_t Sample(const std::vector<float>& logits, const SamplingParams& p, uint64_t step = 0,
               int64_t valid_vocab = -1) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  return SampleToken(logits.data(), vocab, valid_vocab < 0 ? vocab : valid_vocab, p, step);
}

// Counts of the tokens drawn with seeds 0..draws-1 at one step.
std::vector<int64_t> CountOverSeeds(const std::vector<float>& logits, SamplingParams p, int draws,
                                    uint64_t step = 0) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int s = 0; s < draws; ++s) {
    p.seed = static_cast<uint64_t>(s);
    ++counts[Sample(logits, p, step)];
  }
  return counts;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Pearson's statistic over the ids with expected probability > 0; an id with probability 0
// that is drawn makes it infinite.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(total);
    if (expected == 0) {
      if (counts[i] != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = static_cast<double>(counts[i]) - expected;
    chi += d * d / expected;
  }
  return chi;
}

std::set<int32_t> Support(const std::vector<int64_t>& counts) {
  std::set<int32_t> ids;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) ids.insert(static_cast<int32_t>(i));
  }
  return ids;
}

// Logits whose softmax is exactly-ish the given probabilities.
std::vector<float> LogProbs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// A small deterministic logit vector generator (independent of the sampler's RNG).
std::vector<float> PseudoRandomLogits(int64_t n, uint64_t salt, float scale) {
  std::vector<float> l(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = SplitMix64(salt * 1000003u + static_cast<uint64_t>(i));
    l[i] = scale * (static_cast<float>(bits >> 40) / static_cast<float>(1 << 24) - 0.5f);
  }
  return l;
}

// The documented procedure (sampler.h), written plainly with full sorts and no shortcuts.
int32_t ReferenceSample(const std::vector<float>& logits, int64_t valid_vocab, const SamplingParams& p,
                        uint64_t step) {
  const int64_t n = std::clamp<int64_t>(valid_vocab, 1, static_cast<int64_t>(logits.size()));
  auto value = [&](int32_t id) { return std::isnan(logits[id]) ? -kInf : logits[id]; };
  if (p.temperature == 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
      if (value(i) > value(best)) best = i;
    }
    return best;
  }
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) {
    if (value(i) != -kInf) ids.push_back(i);
  }
  if (ids.empty()) return 0;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) {
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return value(a) != value(b) ? value(a) > value(b) : a < b;
    });
    ids.resize(p.top_k);
    std::sort(ids.begin(), ids.end());
  }
  float m = -kInf;
  for (int32_t id : ids) m = std::max(m, value(id));
  std::vector<double> w(n, 0.0);
  double W = 0;
  for (int32_t id : ids) {
    w[id] = m == kInf ? (value(id) == kInf ? 1.0 : 0.0)
                      : std::exp((static_cast<double>(value(id)) - static_cast<double>(m)) / p.temperature);
    W += w[id];
  }
  if (p.top_p < 1) {
    std::vector<int32_t> order = ids;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] != w[b] ? w[a] > w[b] : a < b; });
    double running = 0;
    size_t keep = order.size();
    for (size_t i = 0; i < order.size(); ++i) {
      running += w[order[i]] / W;
      if (running >= static_cast<double>(p.top_p) - kTopPSlack) {
        keep = i + 1;
        break;
      }
    }
    order.resize(keep);
    std::sort(order.begin(), order.end());
    ids = order;
  }
  double kept_W = 0;
  for (int32_t id : ids) kept_W += w[id];
  const double t = CounterRng(p.seed).Uniform(step) * kept_W;
  double acc = 0;
  int32_t last = ids.front();
  for (int32_t id : ids) {
    acc += w[id];
    if (w[id] > 0) last = id;
    if (t < acc) return id;
  }
  return last;
}

TEST(CounterRng, SplitMix64AndUniform) {
  // The first output of the reference SplitMix64 generator seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  const CounterRng rng(42);
  EXPECT_EQ(rng.Bits(7), SplitMix64(42 ^ SplitMix64(7)));
  EXPECT_EQ(rng.Uniform(7), static_cast<double>(rng.Bits(7) >> 11) / 9007199254740992.0);
  double sum = 0;
  for (uint64_t s = 0; s < 10000; ++s) {
    const double u = rng.Uniform(s);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  EXPECT_NE(CounterRng(1).Bits(0), CounterRng(2).Bits(0));
  EXPECT_NE(CounterRng(1).Bits(0), CounterRng(1).Bits(1));
}

TEST(CounterRng, GoldenValues) {
  // Pinned: a change here changes every seeded request's tokens.
  EXPECT_EQ(CounterRng(0).Bits(0), 0xA706DD2F4D197E6Full);
  EXPECT_EQ(CounterRng(12345).Bits(3), 0xAEECE0E0CBB13311ull);
  EXPECT_EQ(CounterRng(12345).Uniform(3), static_cast<double>(0xAEECE0E0CBB13311ull >> 11) * 0x1.0p-53);
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.2f, -0.3f, 0.9f, -2.0f};
  const std::vector<int32_t> plain = {6, 3, 0, 2, 2, 2, 2, 4, 2, 2, 2, 4, 6, 4, 3, 2};
  const std::vector<int32_t> filtered = {6, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 2, 2};
  for (uint64_t step = 0; step < 16; ++step) {
    EXPECT_EQ(Sample(logits, Params(1.0f, 0, 1, 2024), step), plain[step]) << step;
    EXPECT_EQ(Sample(logits, Params(0.7f, 5, 0.9f, 2024), step), filtered[step]) << step;
  }
}

TEST(Sampling, GreedyPicksArgmaxWithLowestIdTies) {
  EXPECT_EQ(Sample({0.1f, 3.0f, -1.0f, 2.9f}, Params(0)), 1);
  EXPECT_EQ(Sample({1.0f, 5.0f, 5.0f, 5.0f, 2.0f}, Params(0)), 1);
  EXPECT_EQ(Sample({7.0f, 7.0f}, Params(0)), 0);
  // top_k, top_p and seed don't matter when greedy.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(Sample({1.0f, 5.0f, 5.0f, 2.0f}, Params(0, 3, 0.5f, seed), seed), 1);
  }
  // -0.0 is greedy too.
  EXPECT_EQ(Sample({1.0f, 5.0f, 5.0f, 2.0f}, Params(-0.0f, 0, 1, 9)), 1);
}

TEST(Sampling, PaddingIsNeverSampled) {
  // The padding rows hold the largest logits; none of them may come out.
  std::vector<float> logits = {0.0f, 0.5f, 1.0f, 0.2f, 100.0f, 100.0f, 100.0f, kNaN};
  const int64_t valid = 4;
  EXPECT_EQ(Sample(logits, Params(0), 0, valid), 2);
  for (const SamplingParams& base : {Params(1), Params(5), Params(1, 2), Params(1, 0, 0.9f), Params(100, 3, 0.95f)}) {
    std::set<int32_t> seen;
    SamplingParams p = base;
    for (uint64_t seed = 0; seed < 2000; ++seed) {
      p.seed = seed;
      const int32_t t = Sample(logits, p, seed % 3, valid);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, valid);
      seen.insert(t);
    }
    EXPECT_GE(seen.size(), 2u);
  }
  // All valid rows −inf: the lowest valid id, never a padding row.
  std::vector<float> dead = {-kInf, -kInf, 3.0f, 4.0f};
  EXPECT_EQ(Sample(dead, Params(0), 0, 2), 0);
  EXPECT_EQ(Sample(dead, Params(1, 0, 1, 5), 0, 2), 0);
  // valid_vocab above vocab is clamped to vocab.
  EXPECT_EQ(SampleToken(logits.data(), 3, 1000, Params(0), 0), 2);
}

TEST(Sampling, SameSeedAndStepGiveTheSameToken) {
  const std::vector<float> logits = PseudoRandomLogits(1000, 1, 4.0f);
  const SamplingParams p = Params(1.0f, 0, 1.0f, 1234);
  std::vector<int32_t> first;
  for (uint64_t step = 0; step < 64; ++step) first.push_back(Sample(logits, p, step));
  // Interleave unrelated calls: they must not disturb anything.
  for (uint64_t step = 0; step < 64; ++step) {
    Sample(logits, Params(1.0f, 0, 1.0f, 99), step + 5);
    EXPECT_EQ(Sample(logits, p, step), first[step]) << step;
  }
  // Backwards too: the draw depends only on (seed, step).
  for (int step = 63; step >= 0; --step) EXPECT_EQ(Sample(logits, p, step), first[step]);
  // The stream moves with the step and with the seed.
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 10u);
  int differ = 0;
  for (uint64_t step = 0; step < 64; ++step) differ += Sample(logits, Params(1.0f, 0, 1.0f, 1235), step) != first[step];
  EXPECT_GT(differ, 32);
}

TEST(Sampling, DistributionOverSeedsMatchesSoftmax) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.2f, -0.3f, 0.9f, -2.0f};
  for (float temperature : {1.0f, 0.7f, 2.5f}) {
    const std::vector<double> probs = Softmax(logits, temperature);
    const std::vector<int64_t> counts = CountOverSeeds(logits, Params(temperature), 20000, 3);
    // 7 degrees of freedom: P(χ² > 29) ≈ 1.4e-4. Fixed seeds, so the outcome is fixed.
    EXPECT_LT(ChiSquare(counts, probs), 29.0) << "temperature " << temperature;
  }
  // Over steps with one seed as well.
  std::vector<int64_t> counts(logits.size(), 0);
  for (uint64_t step = 0; step < 20000; ++step) ++counts[Sample(logits, Params(1.0f, 0, 1, 77), step)];
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 1.0)), 29.0);
}

TEST(Sampling, LowTemperatureApproachesGreedyHighTemperatureFlattens) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.98f, -0.3f, 0.9f, -2.0f};
  // 0.02 logit gap at T = 1e-3: the runner-up has weight e^-20.
  std::vector<int64_t> cold = CountOverSeeds(logits, Params(1e-3f), 5000);
  EXPECT_EQ(Support(cold), std::set<int32_t>({2}));
  std::vector<int64_t> tiny = CountOverSeeds(logits, Params(1e-30f), 2000);
  EXPECT_EQ(Support(tiny), std::set<int32_t>({2}));
  // The share of the argmax falls as the temperature rises.
  double previous = 1.0;
  for (float temperature : {0.1f, 0.5f, 1.0f, 4.0f}) {
    const double share = CountOverSeeds(logits, Params(temperature), 4000)[2] / 4000.0;
    EXPECT_LE(share, previous + 0.02) << temperature;
    previous = share;
  }
  // Very hot: close to uniform over the 8 ids.
  std::vector<int64_t> hot = CountOverSeeds(logits, Params(1e4f), 16000);
  EXPECT_LT(ChiSquare(hot, std::vector<double>(8, 1.0 / 8)), 29.0);
}

TEST(Sampling, TopKOneEqualsGreedy) {
  for (uint64_t salt = 0; salt < 50; ++salt) {
    std::vector<float> logits = PseudoRandomLogits(64, salt, 6.0f);
    if (salt % 2 == 0) logits[40] = logits[10] = 10.0f;  // a tie for the max: the lower id wins
    const int32_t greedy = Sample(logits, Params(0));
    for (uint64_t seed = 0; seed < 20; ++seed) {
      EXPECT_EQ(Sample(logits, Params(3.0f, 1, 1, seed), seed), greedy);
      EXPECT_EQ(Sample(logits, Params(3.0f, 1, 0.5f, seed), seed), greedy);
    }
  }
}

TEST(Sampling, TopKKeepsExactlyK) {
  const std::vector<float> logits = PseudoRandomLogits(50, 7, 2.0f);
  // The 5 largest, by hand.
  std::vector<int32_t> order(50);
  for (int i = 0; i < 50; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const std::set<int32_t> top5(order.begin(), order.begin() + 5);
  // A high temperature makes the 5 nearly uniform, so all of them show up.
  const std::vector<int64_t> counts = CountOverSeeds(logits, Params(5.0f, 5), 4000);
  EXPECT_EQ(Support(counts), top5);
  // Renormalized over the 5: matches the softmax restricted to them.
  std::vector<float> restricted(50, -kInf);
  for (int32_t id : top5) restricted[id] = logits[id];
  EXPECT_LT(ChiSquare(counts, Softmax(restricted, 5.0)), 20.0);  // 4 dof

  // Ties at the boundary keep the lower ids.
  const std::vector<float> flat = {1.0f, 3.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(Support(CountOverSeeds(flat, Params(100.0f, 3), 2000)), std::set<int32_t>({0, 1, 2}));
  // k ≥ the vocabulary: no limit.
  EXPECT_EQ(Support(CountOverSeeds(flat, Params(100.0f, 5), 2000)).size(), 5u);
  EXPECT_EQ(Support(CountOverSeeds(flat, Params(100.0f, 500), 2000)).size(), 5u);
}

TEST(Sampling, TopPKeepsTheNucleus) {
  const std::vector<float> logits = LogProbs({0.5, 0.3, 0.15, 0.05});
  const std::vector<int64_t> p80 = CountOverSeeds(logits, Params(1.0f, 0, 0.8f), 4000);
  EXPECT_EQ(Support(p80), std::set<int32_t>({0, 1}));
  EXPECT_LT(ChiSquare(p80, {0.625, 0.375, 0, 0}), 11.0);  // renormalized; 1 dof
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.81f), 4000)), std::set<int32_t>({0, 1, 2}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.95f), 4000)), std::set<int32_t>({0, 1, 2}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.96f), 4000)), std::set<int32_t>({0, 1, 2, 3}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 1.0f), 4000)), std::set<int32_t>({0, 1, 2, 3}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.5f), 1000)), std::set<int32_t>({0}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 1e-6f), 1000)), std::set<int32_t>({0}));
  // Equal probabilities are ordered by id.
  const std::vector<float> ties = LogProbs({0.2, 0.2, 0.4, 0.2});
  EXPECT_EQ(Support(CountOverSeeds(ties, Params(1.0f, 0, 0.6f), 2000)), std::set<int32_t>({0, 2}));
  EXPECT_EQ(Support(CountOverSeeds(ties, Params(1.0f, 0, 0.7f), 2000)), std::set<int32_t>({0, 1, 2}));
  // Temperature first: at T = 2 the probabilities flatten to ≈ .38, .29, .21, .12, so top_p .8
  // needs three ids.
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(2.0f, 0, 0.8f), 4000)), std::set<int32_t>({0, 1, 2}));
}

TEST(Sampling, TopKAppliesBeforeTopP) {
  const std::vector<float> logits = LogProbs({0.5, 0.3, 0.15, 0.05});
  // Without top-k, top_p .6 keeps {0, 1}; after top_k 2 renormalizes to .625/.375 it keeps {0}.
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.6f), 2000)), std::set<int32_t>({0, 1}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 2, 0.6f), 2000)), std::set<int32_t>({0}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 3, 0.9f), 2000)), std::set<int32_t>({0, 1, 2}));
}

TEST(Sampling, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateSampling(SamplingParams()).ok());
  EXPECT_TRUE(ValidateSampling(Params(0.7f, 40, 0.95f, 3)).ok());
  EXPECT_TRUE(ValidateSampling(Params(0, 0, 1.0f)).ok());
  struct Case {
    SamplingParams p;
    const char* field;
  };
  const std::vector<Case> cases = {
      {Params(kNaN), "temperature"},          {Params(-0.5f), "temperature"},
      {Params(kInf), "temperature"},          {Params(1, -1), "top_k"},
      {Params(1, 0, 0.0f), "top_p"},          {Params(1, 0, -0.1f), "top_p"},
      {Params(1, 0, 1.01f), "top_p"},         {Params(1, 0, kNaN), "top_p"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateSampling(c.p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

TEST(Sampling, NonFiniteLogits) {
  // NaN is −inf: never drawn, never the argmax.
  const std::vector<float> logits = {kNaN, 1.0f, kNaN, 0.0f, -kInf};
  EXPECT_EQ(Sample(logits, Params(0)), 1);
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f), 2000)), std::set<int32_t>({1, 3}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 1), 200)), std::set<int32_t>({1}));
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, 0.5f), 200)), std::set<int32_t>({1}));
  EXPECT_EQ(Sample({kNaN, 2.0f}, Params(0)), 1);
  // Nothing finite: the lowest valid id.
  for (const std::vector<float>& dead : {std::vector<float>{kNaN, kNaN, kNaN}, std::vector<float>{-kInf, kNaN, -kInf}}) {
    EXPECT_EQ(Sample(dead, Params(0)), 0);
    EXPECT_EQ(Sample(dead, Params(1.0f, 0, 1, 5), 3), 0);
    EXPECT_EQ(Sample(dead, Params(0.5f, 2, 0.3f, 5), 3), 0);
  }
  // +inf: the limit puts all mass on the +inf ids, evenly.
  const std::vector<float> hot = {0.0f, kInf, 50.0f, kInf};
  EXPECT_EQ(Sample(hot, Params(0)), 1);
  const std::vector<int64_t> counts = CountOverSeeds(hot, Params(1.0f), 2000);
  EXPECT_EQ(Support(counts), std::set<int32_t>({1, 3}));
  EXPECT_LT(ChiSquare(counts, {0, 0.5, 0, 0.5}), 11.0);
}

TEST(Sampling, UnvalidatedParamsDoNotMisbehave) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  EXPECT_EQ(Sample(logits, Params(-1.0f, 0, 1, 3)), 1);  // greedy
  EXPECT_EQ(Sample(logits, Params(kNaN, 0, 1, 3)), 1);   // greedy
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, -4), 2000)).size(), 3u);  // no limit
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, kNaN), 2000)).size(), 3u);
  EXPECT_EQ(Support(CountOverSeeds(logits, Params(1.0f, 0, -1.0f), 200)), std::set<int32_t>({1}));
  EXPECT_EQ(SampleToken(logits.data(), 0, 0, Params(1.0f), 0), 0);
}

TEST(Sampling, MatchesTheDocumentedProcedureExactly) {
  // Above the size where top-p stops sorting everything; logits on a 1/8 grid, so many tie.
  std::vector<float> logits = PseudoRandomLogits(5000, 11, 12.0f);
  for (float& l : logits) l = std::round(l * 8) / 8;
  logits[17] = kNaN;
  logits[4000] = -kInf;
  const int64_t valid = 4990;
  const std::vector<SamplingParams> params = {
      Params(1.0f), Params(0.05f, 0, 0.9f), Params(0.7f, 0, 0.3f), Params(1.5f, 0, 0.99f),
      Params(1.0f, 100), Params(2.0f, 3000, 0.95f), Params(0.3f, 40, 0.5f), Params(0)};
  for (size_t c = 0; c < params.size(); ++c) {
    SamplingParams p = params[c];
    for (uint64_t seed = 0; seed < 6; ++seed) {
      p.seed = seed * 7919 + c;
      const uint64_t step = seed * 3;
      ASSERT_EQ(SampleToken(logits.data(), 5000, valid, p, step), ReferenceSample(logits, valid, p, step))
          << "params " << c << " seed " << p.seed;
    }
  }
}

TEST(Sampling, FullSizeVocabulary) {
  // The model's shapes: 248320 rows, the last 243 padding.
  const int64_t vocab = 248320, valid = 248077;
  std::vector<float> logits = PseudoRandomLogits(vocab, 3, 20.0f);
  for (int64_t i = valid; i < vocab; ++i) logits[i] = 1e4f;
  for (const SamplingParams& p : {Params(0.8f, 0, 0.9f, 11), Params(0.8f, 50, 0.95f, 12), Params(1.0f, 0, 1, 13)}) {
    const int32_t t = SampleToken(logits.data(), vocab, valid, p, 5);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, valid);
    EXPECT_EQ(SampleToken(logits.data(), vocab, valid, p, 5), t);
  }
  // The nucleus at full size goes through the histogram; it must agree with the plain procedure.
  const SamplingParams nucleus = Params(0.8f, 0, 0.9f, 11);
  EXPECT_EQ(SampleToken(logits.data(), vocab, valid, nucleus, 2), ReferenceSample(logits, valid, nucleus, 2));
}

}  // namespace
}  // namespace q38
