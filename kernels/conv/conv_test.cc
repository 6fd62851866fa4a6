// Tests of the causal depthwise conv + SiLU (docs/model.md §7.1 with dilation 1, §6.3 with
// dilation 3): impulse responses by hand, a naive zero-padded timeline, and state continuation.
#include "kernels/conv/conv.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/testing/op_test_util.h"

namespace q38::cpu {
namespace {

using op_test::Uniform;
using op_test::SiluD;

// Naive: the full input history is `prefix` (rows before this call, oldest first) followed by
// x; times before the sequence start read 0. Each output t sums taps by explicit time offsets.
std::vector<double> NaiveConv(const std::vector<float>& prefix, const std::vector<float>& x,
                              const std::vector<float>& w, int64_t T, int64_t C, int64_t K,
                              int64_t dilation) {
  const int64_t P = static_cast<int64_t>(prefix.size()) / C;
  auto input = [&](int64_t time, int64_t c) -> double {  // time relative to the call's first row
    if (time >= 0) return x[time * C + c];
    if (time + P < 0) return 0.0;
    return prefix[(time + P) * C + c];
  };
  std::vector<double> y(T * C);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t back = 0; back < K; ++back) {  // back = 0 is the current step, tap K−1
        acc += static_cast<double>(w[c * K + (K - 1 - back)]) * input(t - back * dilation, c);
      }
      y[t * C + c] = SiluD(acc);
    }
  }
  return y;
}

TEST(CausalConv, ImpulseResponseDilation1) {
  // One channel, K = 4, w = (1, 2, 3, 4) (tap 3 = current), x = (1, 0, 0, 0, 0) from zero state:
  // pre-activation y[t] = w[3 − t] → (4, 3, 2, 1, 0);
  // silu: (3.9280552, 2.8577224, 1.7615942, 0.7310586, 0).
  const std::vector<float> w = {1, 2, 3, 4}, x = {1, 0, 0, 0, 0};
  std::vector<float> state(3, 0.0f), y(5, NAN);
  CausalConv(x.data(), w.data(), state.data(), y.data(), 5, 1, 4, 1);
  const double want[5] = {3.9280552, 2.8577224, 1.7615942, 0.7310586, 0.0};
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(y[t], want[t], 1e-6) << t;
  // The state holds the last 3 inputs, oldest first.
  EXPECT_EQ(state, (std::vector<float>{0, 0, 0}));
}

TEST(CausalConv, ImpulseResponseDilation3) {
  // The PLE conv: K = 4, dilation 3, state of (4−1)·3 = 9 rows. An impulse at t = 0 reaches
  // t = 0 through tap 3, t = 3 through tap 2, t = 6 through tap 1, t = 9 through tap 0, and no
  // other step. w = (0.5, −1, 2, 1): y = silu(1), 0, 0, silu(2), 0, 0, silu(−1), 0, 0, silu(0.5), 0, 0.
  const std::vector<float> w = {0.5f, -1, 2, 1};
  std::vector<float> x(12, 0.0f);
  x[0] = 1.0f;
  std::vector<float> state(9, 0.0f), y(12, NAN);
  CausalConv(x.data(), w.data(), state.data(), y.data(), 12, 1, 4, 3);
  // silu(1) = 0.7310586, silu(2) = 1.7615942, silu(−1) = −0.2689414, silu(0.5) = 0.3112297
  const double want[12] = {0.7310586, 0, 0, 1.7615942, 0, 0, -0.2689414, 0, 0, 0.3112297, 0, 0};
  for (int t = 0; t < 12; ++t) EXPECT_NEAR(y[t], want[t], 1e-6) << t;
}

TEST(CausalConv, StateFeedsTheFirstSteps) {
  // Two channels, K = 2, dilation 1: state = (s0, s1) (one row of C = 2). x one row.
  // y[c] = silu(w[c,0]·state[c] + w[c,1]·x[c]).
  //   c0: w = (1, 1), state 0.5, x 0.25  → silu(0.75)  = 0.75·0.6791787       = 0.5093840
  //   c1: w = (2, −1), state −1, x 1     → silu(−3)    = −3·0.0474259         = −0.1422776
  const std::vector<float> w = {1, 1, 2, -1}, x = {0.25f, 1};
  std::vector<float> state = {0.5f, -1}, y(2, NAN);
  CausalConv(x.data(), w.data(), state.data(), y.data(), 1, 2, 2, 1);
  EXPECT_NEAR(y[0], 0.5093840, 1e-6);
  EXPECT_NEAR(y[1], -0.1422776, 1e-6);
  EXPECT_EQ(state, x);  // the new history is this call's row
}

TEST(CausalConv, MatchesNaiveTimeline) {
  const int64_t C = 5, K = 4;
  for (int64_t dilation : {1, 3}) {
    for (int64_t T : {1, 2, 11}) {
      const int64_t hist = (K - 1) * dilation;
      const std::vector<float> w = Uniform(C * K, 31), x = Uniform(T * C, 32 + T, -2, 2);
      const std::vector<float> prior = Uniform(hist * C, 33);
      std::vector<float> state = prior, y(T * C, NAN);
      CausalConv(x.data(), w.data(), state.data(), y.data(), T, C, K, dilation);
      const std::vector<double> want = NaiveConv(prior, x, w, T, C, K, dilation);
      for (int64_t i = 0; i < T * C; ++i) {
        ASSERT_FALSE(std::isnan(y[i])) << i;
        EXPECT_NEAR(y[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << dilation << " " << T << " " << i;
      }
      // The new state is the last `hist` rows of (prior, x), oldest first.
      std::vector<float> line = prior;
      line.insert(line.end(), x.begin(), x.end());
      const std::vector<float> want_state(line.end() - hist * C, line.end());
      EXPECT_EQ(state, want_state) << dilation << " " << T;
    }
  }
}

TEST(CausalConv, SplitCallsEqualOneCall) {
  // One call over T equals consecutive calls over T1 + T2 carrying the state, for splits
  // shorter and longer than the history, from a zero (sequence start) state.
  const int64_t C = 3, K = 4, T = 13;
  for (int64_t dilation : {1, 3}) {
    const int64_t hist = (K - 1) * dilation;
    const std::vector<float> w = Uniform(C * K, 41), x = Uniform(T * C, 42, -2, 2);
    std::vector<float> state_one(hist * C, 0.0f), y_one(T * C, NAN);
    CausalConv(x.data(), w.data(), state_one.data(), y_one.data(), T, C, K, dilation);
    for (int64_t T1 : {1, 2, 5, 9, 12}) {
      std::vector<float> state(hist * C, 0.0f), y(T * C, NAN);
      CausalConv(x.data(), w.data(), state.data(), y.data(), T1, C, K, dilation);
      CausalConv(x.data() + T1 * C, w.data(), state.data(), y.data() + T1 * C, T - T1, C, K, dilation);
      // The same products summed in the same order: bit-identical.
      EXPECT_EQ(y, y_one) << "dilation " << dilation << " split " << T1;
      EXPECT_EQ(state, state_one) << "dilation " << dilation << " split " << T1;
    }
    // Token by token (decode) also equals the single call.
    std::vector<float> state(hist * C, 0.0f), y(T * C, NAN);
    for (int64_t t = 0; t < T; ++t) {
      CausalConv(x.data() + t * C, w.data(), state.data(), y.data() + t * C, 1, C, K, dilation);
    }
    EXPECT_EQ(y, y_one) << "dilation " << dilation << " decode";
  }
}

}  // namespace
}  // namespace q38::cpu
