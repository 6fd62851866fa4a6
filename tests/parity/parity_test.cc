// Parity with the Hugging Face reference (transformers' qwen4_exp in FP32, NVFP4 experts
// dequantized exactly), checked without Python: the fixture holds the reference's logits at every
// prompt position and its 32-token greedy continuations for a tiny checkpoint that our generator
// reproduces byte for byte from its seed. Made by tests/parity/hf_reference.py + make_fixture.py.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/checkpoint_generator.h"
#include "worker/checkpoint/test_files.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"

namespace q38 {
namespace {

struct Case {
  std::string name;
  std::vector<int32_t> ids, greedy;
  std::vector<float> logits;  // [T, V]
};

class Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string stem = std::string(std::getenv("Q38_SOURCE_DIR")) + "/tests/fixtures/parity/tiny_seed1";
    std::ifstream js(stem + ".json");
    ASSERT_TRUE(js) << stem << ".json";
    index_ = nlohmann::json::parse(js);
    std::ifstream bin(stem + ".bin", std::ios::binary);
    const std::string blob((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    for (const auto& c : index_["cases"]) {
      Case k{c["name"], c["ids"].get<std::vector<int32_t>>(), c["greedy"].get<std::vector<int32_t>>(), {}};
      const size_t off = c["logits"]["offset"], n = c["logits"]["nbytes"];
      ASSERT_LE(off + n, blob.size());
      k.logits.resize(n / 4);
      std::memcpy(k.logits.data(), blob.data() + off, n);
      cases_.push_back(std::move(k));
    }
    dir_ = new testing_files::ScratchDir();
    ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = index_["checkpoint"]["seed"].get<uint64_t>()},
                                   dir_->path()).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static nlohmann::json index_;
  static std::vector<Case> cases_;
  static testing_files::ScratchDir* dir_;
};
nlohmann::json Parity::index_;
std::vector<Case> Parity::cases_;
testing_files::ScratchDir* Parity::dir_ = nullptr;

TEST_F(Parity, GeneratorReproducesTheReferenceCheckpoint) {
  EXPECT_EQ(*Sha256File(dir_->File("model.safetensors")),
            index_["checkpoint"]["model_safetensors_sha256"].get<std::string>());
}

struct Outcome {
  std::vector<std::vector<float>> logits;   // per case, [T, V]
  std::vector<std::vector<int32_t>> greedy;  // per case, 32 tokens
};

Outcome RunAll(const std::string& dir, const std::vector<Case>& cases, int tp, CpuMath math) {
  const ModelConfig config = *LoadModelConfig(dir);
  auto store = *TensorStore::Open(dir);
  Outcome out;
  absl::Status s = RunLocalGroup(config, *store, tp, [&](Model& model) -> absl::Status {
    Outcome mine;
    for (const Case& c : cases) {
      SequenceState s = model.NewSequence(256);
      ASSIGN_OR_RETURN(Buffer local, model.Forward(c.ids, s, static_cast<int64_t>(c.ids.size())));
      ASSIGN_OR_RETURN(std::vector<float> logits, model.GatherLogits(local));
      mine.logits.push_back(std::move(logits));
      ASSIGN_OR_RETURN(GreedyResult g, GenerateGreedy(model, c.ids, static_cast<int32_t>(c.greedy.size()), 16));
      mine.greedy.push_back(std::move(g.tokens));
    }
    if (model.comm().rank() == 0) out = std::move(mine);
    return absl::OkStatus();
  }, {.cpu_math = math});
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// max |ours − ref| / max |ref| over every logit of every position; recorded in docs/parity.md.
void ExpectParity(const std::vector<Case>& cases, const Outcome& o, int tp, absl::string_view math) {
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ASSERT_EQ(o.logits[i].size(), c.logits.size()) << c.name;
    double diff = 0, ref = 0;
    for (size_t j = 0; j < c.logits.size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(o.logits[i][j]) - c.logits[j]));
      ref = std::max(ref, std::fabs(static_cast<double>(c.logits[j])));
    }
    const double rel = diff / ref;
    std::cout << "parity TP" << tp << " " << math << " " << c.name << ": T=" << c.ids.size() << " max rel err " << rel << "\n";
    EXPECT_LE(rel, 1e-5) << c.name;
    EXPECT_EQ(o.greedy[i], c.greedy) << c.name;
  }
}

// The exact reference and the fast path the server's CPU workers run (kernels/backend.h CpuMath).
TEST_F(Parity, Tp1MatchesTransformers) { ExpectParity(cases_, RunAll(dir_->path(), cases_, 1, CpuMath::kExact), 1, "exact"); }
TEST_F(Parity, Tp4MatchesTransformers) { ExpectParity(cases_, RunAll(dir_->path(), cases_, 4, CpuMath::kExact), 4, "exact"); }
TEST_F(Parity, Tp1FastMatchesTransformers) { ExpectParity(cases_, RunAll(dir_->path(), cases_, 1, CpuMath::kFast), 1, "fast"); }
TEST_F(Parity, Tp4FastMatchesTransformers) { ExpectParity(cases_, RunAll(dir_->path(), cases_, 4, CpuMath::kFast), 4, "fast"); }

// Log probabilities (the HTTP API's and Generate's, docs/api.md) through the rank-local merge of
// Model::SummarizeLogits, against the log-softmax of transformers' logits at each case's last
// position: the same 20 most likely ids, logprobs within 1e-4, in the fast path at TP 1 and 4.
TEST_F(Parity, LogprobsMatchTheLogSoftmaxOfTransformersLogits) {
  const ModelConfig config = *LoadModelConfig(dir_->path());
  auto store = *TensorStore::Open(dir_->path());
  const int64_t V = config.vocab_size, k = 20;
  for (int tp : {1, 4}) {
    std::vector<cpu::LogitsSummary> got;
    absl::Status s = RunLocalGroup(config, *store, tp, [&](Model& model) -> absl::Status {
      std::vector<cpu::LogitsSummary> mine;
      for (const Case& c : cases_) {
        SequenceState state = model.NewSequence(256);
        ASSIGN_OR_RETURN(Buffer local, model.Forward(c.ids, state));
        ASSIGN_OR_RETURN(cpu::LogitsSummary summary, model.SummarizeLogits(local, V, k));
        mine.push_back(std::move(summary));
      }
      if (model.comm().rank() == 0) got = std::move(mine);
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(got.size(), cases_.size());
    for (size_t i = 0; i < cases_.size(); ++i) {
      const Case& c = cases_[i];
      const float* ref = c.logits.data() + (c.ids.size() - 1) * V;
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < V; ++j) m = std::max<double>(m, ref[j]);
      for (int64_t j = 0; j < V; ++j) sum += std::exp(ref[j] - m);
      const double lse = m + std::log(sum);
      std::vector<int32_t> order(V);
      for (int32_t j = 0; j < V; ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
      ASSERT_EQ(got[i].top.size(), static_cast<size_t>(k)) << c.name;
      double worst = 0;
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(got[i].top[j].first, order[j]) << "TP" << tp << " " << c.name << " rank " << j;
        worst = std::max(worst, std::fabs((got[i].top[j].second - got[i].log_sum_exp) - (ref[order[j]] - lse)));
      }
      std::cout << "logprobs TP" << tp << " " << c.name << ": max |Δ logprob| over the top 20 " << worst << "\n";
      EXPECT_LE(worst, 1e-4) << "TP" << tp << " " << c.name;
    }
  }
}

}  // namespace
}  // namespace q38
