// The whole model on GPUs against the CPU FP32 reference, on the tiny geometry: teacher-forced
// over 600 positions (prefill, then token-by-token decode through the recorded graph), at TP1 and
// TP2; and the decode graph's replays bitwise equal to eager execution with changing inputs.
// Skipped where no GPU (or, for TP2, no second GPU) is visible.
#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "worker/checkpoint/test_files.h"
#include "worker/model/checkpoint_generator.h"
#include "worker/model/local_group.h"

namespace q38 {
namespace {

using testing_files::ScratchDir;

int Gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

constexpr int64_t kPositions = 600, kPrefill = 64;

// Tokens spread over the vocabulary with an EOS inside (it cuts the PLE n-gram history).
std::vector<int32_t> Sequence() {
  std::vector<int32_t> ids(kPositions);
  for (int64_t i = 0; i < kPositions; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 11) % 1000);
  ids[300] = 1000;
  return ids;
}

// The tiny checkpoint and its CPU FP32 logits at every position, made once per indexer budget:
// the tiny model's own (16 tokens, sparse selection from position 19 on) and one that keeps all
// 600 positions dense, which separates the indexer's near-tied block choices from the rest.
struct Reference {
  ScratchDir dir;
  ModelConfig config;
  std::unique_ptr<TensorStore> store;
  std::vector<float> logits;
};

const Reference& ReferenceFor(int64_t budget) {
  static std::map<int64_t, std::unique_ptr<Reference>> cache;
  std::unique_ptr<Reference>& r = cache[budget];
  if (r) return *r;
  r = std::make_unique<Reference>();
  ModelConfig c = TinyModelConfig();
  c.indexer_budget = budget;
  EXPECT_TRUE(GenerateCheckpoint(c, {.seed = 7}, r->dir.path()).ok());
  r->config = *LoadModelConfig(r->dir.path());
  r->store = std::move(*TensorStore::Open(r->dir.path()));
  Reference* ref = r.get();
  EXPECT_TRUE(RunLocalGroup(ref->config, *ref->store, 1, [ref](Model& m) -> absl::Status {
    SequenceState s = m.NewSequence(kPositions);
    absl::StatusOr<Buffer> local = m.Forward(Sequence(), s, kPositions);
    if (!local.ok()) return local.status();
    absl::StatusOr<std::vector<float>> all = m.GatherLogits(*local);
    if (!all.ok()) return all.status();
    ref->logits = std::move(*all);
    return absl::OkStatus();
  }).ok());
  return *r;
}

constexpr int64_t kSparse = 16, kDense = 1024;

class TinyOnGpu : public ::testing::Test {
 protected:
  // Logits of every position on GPUs: a prefill of kPrefill tokens, then one token at a time.
  static std::vector<float> OnGpus(const Reference& ref, int tp, bool graph) {
    std::vector<float> out;
    LocalGroupOptions o;
    o.device = "cuda";
    o.model.decode_graph = graph;
    absl::Status s = RunLocalGroup(ref.config, *ref.store, tp, [&](Model& m) -> absl::Status {
      const std::vector<int32_t> ids = Sequence();
      SequenceState st = m.NewSequence(kPositions);
      std::vector<float> all;
      absl::StatusOr<Buffer> local = m.Forward({ids.begin(), ids.begin() + kPrefill}, st, kPrefill);
      for (int64_t i = kPrefill;; ++i) {
        if (!local.ok()) return local.status();
        absl::StatusOr<std::vector<float>> logits = m.GatherLogits(*local);
        if (!logits.ok()) return logits.status();
        all.insert(all.end(), logits->begin(), logits->end());
        m.backend().Fill(local->t(), NAN);  // a replay that skipped writing its output would show
        if (i == kPositions) break;
        local = m.Forward({ids[i]}, st);
      }
      if (m.comm().rank() == 0) out = std::move(all);
      return absl::OkStatus();
    }, o);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Top-1 agreement over all positions and the relative error of the last position's logits.
  // A random model's top two logits are often nearly tied, and there FP16 decides a coin flip:
  // agreement is also counted over the positions whose reference margin (top-1 minus top-2)
  // exceeds 1% of the position's largest logit magnitude.
  struct Agreed {
    double all = 0;      // over every position
    double decided = 0;  // over the positions with a margin
    int64_t decided_positions = 0;
  };
  static Agreed Agreement(const Reference& ref, const std::vector<float>& got, const char* what) {
    const int64_t V = ref.config.vocab_size;
    EXPECT_EQ(got.size(), ref.logits.size());
    if (got.size() != ref.logits.size()) return {};
    int64_t agree = 0, decided = 0, decided_agree = 0;
    for (int64_t p = 0; p < kPositions; ++p) {
      const float* a = got.data() + p * V;
      const float* b = ref.logits.data() + p * V;
      const int64_t top = std::max_element(b, b + V) - b;
      float second = -INFINITY, scale = 0;
      for (int64_t v = 0; v < V; ++v) {
        if (v != top) second = std::max(second, b[v]);
        scale = std::max(scale, std::fabs(b[v]));
      }
      const bool same = std::max_element(a, a + V) - a == top;
      agree += same;
      if (b[top] - second > 0.01f * scale) {
        ++decided;
        decided_agree += same;
      }
    }
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double a = got[(kPositions - 1) * V + v], b = ref.logits[(kPositions - 1) * V + v];
      EXPECT_TRUE(std::isfinite(a)) << "logit " << v;
      diff = std::max(diff, std::fabs(a - b));
      scale = std::max(scale, std::fabs(b));
    }
    const double agreement = static_cast<double>(agree) / kPositions, rel = diff / scale;
    std::printf("%s: top-1 agreement %.4f over %lld positions, %.4f over the %lld with a margin above 1%%; "
                "final logits relative error %.3e\n",
                what, agreement, static_cast<long long>(kPositions), static_cast<double>(decided_agree) / decided,
                static_cast<long long>(decided), rel);
    EXPECT_LE(rel, 2e-2) << what;
    return {agreement, static_cast<double>(decided_agree) / decided, decided};
  }

  // The target, ≥ 99% top-1 agreement over at least 512 positions, at every position and
  // with both the dense and the tiny model's sparse attention. The agreement over decided
  // positions is printed alongside to show where the misses fall (docs/perf/gpu.md).
  static void ExpectAgreement(int tp) {
    const std::string dense = "TP" + std::to_string(tp) + " dense", sparse = "TP" + std::to_string(tp) + " sparse";
    EXPECT_GE(Agreement(ReferenceFor(kDense), OnGpus(ReferenceFor(kDense), tp, true), dense.c_str()).all, 0.99);
    EXPECT_GE(Agreement(ReferenceFor(kSparse), OnGpus(ReferenceFor(kSparse), tp, true), sparse.c_str()).all, 0.99);
  }
};

TEST_F(TinyOnGpu, Tp1MatchesCpuReference) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  ExpectAgreement(1);
}

TEST_F(TinyOnGpu, Tp2MatchesCpuReference) {
  if (Gpus() < 2) GTEST_SKIP() << "fewer than two GPUs";
  ExpectAgreement(2);
}

TEST_F(TinyOnGpu, DecodeGraphReplaysEqualEagerSteps) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  // Same inputs, graph against eager, 536 decode steps; OnGpus poisons each step's output
  // buffer after reading it, so a replay that did not rewrite it would show NaN.
  const Reference& ref = ReferenceFor(kSparse);
  const std::vector<float> graph = OnGpus(ref, 1, true), eager = OnGpus(ref, 1, false);
  ASSERT_EQ(graph.size(), eager.size());
  int64_t differing = 0;
  for (size_t i = 0; i < graph.size(); ++i) differing += std::memcmp(&graph[i], &eager[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0) << "of " << graph.size() << " logits over " << kPositions - kPrefill << " decode steps";
}

}  // namespace
}  // namespace q38
