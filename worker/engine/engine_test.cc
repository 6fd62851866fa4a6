// The engine's log probabilities against the same decode written out by hand over the gathered
// logits (a log-softmax in double), greedy and sampled, at TP 1 and 2; asking for them never
// changes a token. Timing the prefill's chunks gives one time a chunk and changes no token.
#include "worker/engine/engine.h"

#include <cmath>
#include <mutex>

#include <gtest/gtest.h>

#include "common/status.h"
#include "worker/model/local_group.h"

namespace q38 {
namespace {

struct Emitted {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
};

// Rank 0's tokens and log probabilities of one engine run over synthetic tiny weights, and its
// prefill chunks' times.
Emitted RunEngine(int tp, const RunSpec& spec, std::vector<double>* chunk_seconds = nullptr) {
  const ModelConfig config = TinyModelConfig();
  Emitted out;
  std::mutex mu;
  absl::Status s = RunSyntheticGroup(config, 5, tp, [&](Model& m) -> absl::Status {
    Engine engine(m, 256, config.vocab_size);
    const Engine::Emit emit = [&](int32_t token, const std::optional<TokenLogprobs>& lp) {
      std::lock_guard<std::mutex> l(mu);
      out.tokens.push_back(token);
      EXPECT_EQ(lp.has_value(), spec.logprobs >= 0);
      if (lp) out.logprobs.push_back(*lp);
    };
    ASSIGN_OR_RETURN(RunResult r, engine.Run(spec, emit, [] { return false; }));
    if (chunk_seconds != nullptr && m.comm().rank() == 0) *chunk_seconds = r.prefill_chunk_seconds;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The reference: the engine's loop by hand, with each step's logits gathered to the host (the
// synthetic weights of each TP are drawn apart, so the reference runs at the same TP).
Emitted ByHand(int tp, const RunSpec& spec) {
  const ModelConfig config = TinyModelConfig();
  Emitted out;
  std::mutex mu;
  absl::Status s = RunSyntheticGroup(config, 5, tp, [&](Model& m) -> absl::Status {
    SequenceState state = m.NewSequence(256);
    std::vector<int32_t> ids = spec.prompt;
    for (int32_t step = 0; step < spec.max_tokens; ++step) {
      ASSIGN_OR_RETURN(Buffer local, m.Forward(ids, state));
      ASSIGN_OR_RETURN(std::vector<float> logits, m.GatherLogits(local));
      const int64_t V = config.vocab_size;
      const int32_t token = SampleToken(logits.data(), static_cast<int64_t>(logits.size()), V, spec.sampling, step);
      double m_ = -INFINITY, sum = 0;
      for (int64_t i = 0; i < V; ++i) m_ = std::max<double>(m_, logits[i]);
      for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[i] - m_);
      const double lse = m_ + std::log(sum);
      TokenLogprobs lp;
      lp.logprob = static_cast<float>(logits[token] - lse);
      std::vector<int32_t> order(V);
      for (int32_t i = 0; i < V; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      for (int32_t j = 0; j < spec.logprobs; ++j) lp.top.push_back({order[j], static_cast<float>(logits[order[j]] - lse)});
      if (m.comm().rank() == 0) {
        std::lock_guard<std::mutex> l(mu);
        out.tokens.push_back(token);
        out.logprobs.push_back(lp);
      }
      ids = {token};
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

RunSpec Spec(float temperature, int32_t logprobs) {
  RunSpec spec;
  spec.request_id = 1;
  spec.prompt = {11, 48, 85, 122, 159, 196};
  spec.sampling.temperature = temperature;
  spec.sampling.seed = 99;
  spec.max_tokens = 10;
  spec.logprobs = logprobs;
  return spec;
}

TEST(Engine, LogprobsMatchALogSoftmaxOfTheGatheredLogits) {
  for (float temperature : {0.0f, 0.9f}) {
    for (int tp : {1, 2}) {
      const Emitted want = ByHand(tp, Spec(temperature, 5));
      const Emitted got = RunEngine(tp, Spec(temperature, 5));
      const std::string at = "TP" + std::to_string(tp) + " temperature " + std::to_string(temperature);
      ASSERT_EQ(got.tokens, want.tokens) << at;
      ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << at;
      for (size_t i = 0; i < got.logprobs.size(); ++i) {
        EXPECT_NEAR(got.logprobs[i].logprob, want.logprobs[i].logprob, 1e-5) << at << " token " << i;
        ASSERT_EQ(got.logprobs[i].top.size(), 5u) << at;
        for (size_t j = 0; j < 5; ++j) {
          EXPECT_EQ(got.logprobs[i].top[j].first, want.logprobs[i].top[j].first) << at << " token " << i << " rank " << j;
          EXPECT_NEAR(got.logprobs[i].top[j].second, want.logprobs[i].top[j].second, 1e-5) << at;
        }
        if (temperature == 0) {
          EXPECT_EQ(got.logprobs[i].top[0].second, got.logprobs[i].logprob) << at;
        }
      }
    }
  }
}

TEST(Engine, AskingForLogprobsChangesNoToken) {
  for (float temperature : {0.0f, 0.9f}) {
    for (int tp : {1, 2}) {
      const std::vector<int32_t> plain = RunEngine(tp, Spec(temperature, -1)).tokens;
      for (int32_t k : {0, 1, 20}) {
        const Emitted with = RunEngine(tp, Spec(temperature, k));
        EXPECT_EQ(with.tokens, plain) << "TP" << tp << " k " << k << " temperature " << temperature;
        for (const TokenLogprobs& lp : with.logprobs) {
          EXPECT_EQ(lp.top.size(), static_cast<size_t>(k));
          EXPECT_LE(lp.logprob, 0.0f);
        }
      }
    }
  }
}

TEST(Engine, TimedPrefillChunksGiveATimeEachAndTheSameTokens) {
  RunSpec spec = Spec(0.0f, -1);
  spec.prefill_chunk = 4;  // 6 prompt tokens: chunks of 4 and 2
  std::vector<double> untimed, timed;
  const std::vector<int32_t> plain = RunEngine(1, spec, &untimed).tokens;
  EXPECT_TRUE(untimed.empty());
  spec.time_prefill_chunks = true;
  EXPECT_EQ(RunEngine(1, spec, &timed).tokens, plain);
  ASSERT_EQ(timed.size(), 2u);
  for (double s : timed) EXPECT_GT(s, 0.0);
}

}  // namespace
}  // namespace q38
