// The whole model on GPUs against the CPU FP32 reference, on the tiny geometry and the trained
// small model: teacher-forced over 600 positions (a prefill, then token-by-token decode), at TP1
// and TP2 (over NCCL on two GPUs, or through host memory on one). Each configuration runs twice,
// eagerly so that its discrete decisions (MoE routing, indexer block selection) can be seen: free,
// as served, and with every decision taken as FP32 took it. A near tie is decided by rounding, and
// one expert or block taken otherwise moves every later position (docs/precision.md), so the
// arithmetic is judged where the decisions agree: the aligned run against FP32, the free run
// against FP32 made to take the free run's decisions, each of which must have been a near tie.
// Also: the ranks' replicated state bitwise equal at TP2, and the decode graph's replays bitwise
// equal to eager execution. Skipped where no GPU (or, for TP2 over NCCL, no second GPU) is
// visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "glog/logging.h"

#include "common/status.h"
#include "kernels/fp16_emulation.h"
#include "tools/checkpoint/checkpoint_generator.h"
#include "tools/precision/agreement.h"
#include "tools/precision/decision_record.h"
#include "worker/checkpoint/test_files.h"
#include "worker/model/local_group.h"

namespace q38 {
namespace {

using testing_files::ScratchDir;

int Gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

constexpr int64_t kPositions = 600, kPrefill = 64;

// A routing decision FP16 arithmetic may take either way: the reference's k-th and (k+1)-th
// router logits this many FP16 spacings apart or fewer. The contract's own emulation first
// decides otherwise than FP32 at up to 7 (tiny seeds 1, 2 and 7), and at up to 43 where it
// decides otherwise than FP32 would in the same state anywhere along the probe (tiny seeds 1-5
// and 7, dense and sparse, TP1 and TP2; docs/precision.md); a wrong kernel moves logits by far
// more.
constexpr float kFirstTieUlps = 32, kTieUlps = 64;

// The cases: the tiny random checkpoint with its own indexer budget (16 tokens, sparse selection
// from position 19 on) and with one that keeps all 600 positions dense; and the trained small
// model of the repository (models/small; its budget of 2048 keeps the probe dense too).
enum class Case { kTinySparse, kTinyDense, kTrained };

std::string Name(Case c) {
  switch (c) {
    case Case::kTinySparse: return "sparse";
    case Case::kTinyDense: return "dense";
    case Case::kTrained: return "trained";
  }
  return "";
}

// A case's checkpoint and its CPU runs, made once: FP32 (with its decisions) and the FP16
// contract's emulation, free and following FP32's decisions.
struct Reference {
  ScratchDir dir;
  ModelConfig config;
  std::unique_ptr<TensorStore> store;
  TeacherForced fp32, contract, contract_aligned;
  Decisions fp32_decisions;
};

const Reference& ReferenceFor(Case which) {
  static std::map<Case, std::unique_ptr<Reference>> cache;
  std::unique_ptr<Reference>& r = cache[which];
  if (r) return *r;
  r = std::make_unique<Reference>();
  std::string path = r->dir.path();
  if (which == Case::kTrained) {
    const char* source = std::getenv("Q38_SOURCE_DIR");  // set by CTest and scripts/gpu-run.sh
    EXPECT_NE(source, nullptr) << "Q38_SOURCE_DIR names the checkout that holds models/small";
    path = std::string(source ? source : ".") + "/models/small";
  } else {
    ModelConfig c = TinyModelConfig();
    c.indexer_budget = which == Case::kTinySparse ? 16 : 1024;
    EXPECT_TRUE(GenerateCheckpoint(c, {.seed = 7}, path).ok());
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(path);
  EXPECT_TRUE(config.ok()) << config.status();
  r->config = *config;
  r->store = std::move(*TensorStore::Open(path));
  const std::vector<int32_t> ids = ProbeSequence(kPositions, r->config);
  auto cpu = MakeCpuBackend(), emulated = MakeFp16EmulationBackend();
  DecisionRecorder decisions;
  ModelOptions recorded, aligned;
  InstallDecisionHooks(recorded, {.record = &decisions});
  absl::StatusOr<TeacherForced> fp32 = TeacherForcedOnBackend(r->config, *r->store, *cpu, ids, kPrefill, recorded);
  r->fp32_decisions = decisions.decisions();
  InstallDecisionHooks(aligned, {.follow = &r->fp32_decisions});
  absl::StatusOr<TeacherForced> contract = TeacherForcedOnBackend(r->config, *r->store, *emulated, ids, kPrefill);
  absl::StatusOr<TeacherForced> contract_aligned =
      TeacherForcedOnBackend(r->config, *r->store, *emulated, ids, kPrefill, aligned);
  EXPECT_TRUE(fp32.ok() && contract.ok() && contract_aligned.ok());
  if (fp32.ok()) r->fp32 = std::move(*fp32);
  if (contract.ok()) r->contract = std::move(*contract);
  if (contract_aligned.ok()) r->contract_aligned = std::move(*contract_aligned);
  return *r;
}

// How one configuration runs on GPUs. Only eager runs can observe or steer their decisions.
struct GpuRun {
  int tp = 1;
  std::string comm = "auto";  // LocalGroupOptions::cuda_comm; "host": every rank on one GPU
  bool graph = true;
  DecisionRecorder* record = nullptr;
  const Decisions* follow = nullptr;
};

class TinyOnGpu : public ::testing::Test {
 protected:
  // Each rank's run: a prefill of kPrefill tokens, then one token at a time.
  static std::vector<TeacherForced> OnGpus(const Reference& ref, const GpuRun& run) {
    std::vector<TeacherForced> out(run.tp);
    LocalGroupOptions o;
    o.device = "cuda";
    o.cuda_comm = run.comm;
    o.model.decode_graph = run.graph;
    if (run.record != nullptr || run.follow != nullptr) {
      CHECK(!run.graph) << "decision hooks copy through the host: eager runs only";
      InstallDecisionHooks(o.model, {.follow = run.follow, .record = run.record});
    }
    absl::Status s = RunLocalGroup(ref.config, *ref.store, run.tp, [&](Model& m) -> absl::Status {
      // Each step's output is poisoned once read: a replay that skipped writing it would show.
      const auto poison = [&](Buffer& b) { m.backend().Fill(b.t(), NAN); };
      const std::vector<int32_t> ids = ProbeSequence(kPositions, ref.config);
      ASSIGN_OR_RETURN(out[m.comm().rank()], TeacherForcedRun(m, ids, kPrefill, poison));
      return absl::OkStatus();
    }, o);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Prints how a GPU run follows FP32 (and the emulation's own numbers beside it); checks that
  // every rank holds the same replica. Returns the agreement with FP32.
  static Agreement Report(const std::string& what, const Reference& ref, const std::vector<TeacherForced>& ranks,
                          const TeacherForced& contract) {
    const std::vector<float>& gpu = ranks[0].logits;
    const std::vector<float>& want = ref.fp32.logits;
    EXPECT_EQ(gpu.size(), want.size()) << what;
    if (gpu.size() != want.size()) return {};
    const int64_t V = ref.config.vocab_size, di = ref.config.indexer_head_dim;
    const Agreement fp32 = CompareLogits(gpu, want, V);
    std::printf("%s: %s\n", what.c_str(), Describe(fp32).c_str());
    std::printf("%s, CPU FP16 contract against FP32: %s\n", what.c_str(),
                Describe(CompareLogits(contract.logits, want, V)).c_str());
    std::printf("%s, GPU against the CPU FP16 contract: %s\n", what.c_str(),
                Describe(CompareLogits(gpu, contract.logits, V)).c_str());
    std::printf("%s, GPU against FP32 along the probe: %s\n", what.c_str(), ErrorAlongPositions(gpu, want, V, 6).c_str());
    // Where a departure enters: the index keys project the input of each attention layer.
    std::printf("%s", IndexKeysAlongProbe(ranks[0], ref.fp32, di, 6, what + ", GPU against FP32, ").c_str());
    // Every rank computes the replicated activations from the same all-reduced sums with the
    // same kernels, so their copies stay bitwise equal; a rank that drifted would, at a near tie,
    // route its half of the experts differently from the other's.
    for (size_t r = 1; r < ranks.size(); ++r) {
      EXPECT_EQ(ranks[r].index_keys.size(), ranks[0].index_keys.size()) << what;
      for (size_t k = 0; k < ranks[0].index_keys.size() && k < ranks[r].index_keys.size(); ++k) {
        EXPECT_EQ(FirstDifferingRow(ranks[r].index_keys[k], ranks[0].index_keys[k], di), -1)
            << what << ": the index keys of layer " << ranks[0].attention_layers[k] << " on rank " << r
            << " differ from rank 0's from this position on";
      }
    }
    EXPECT_TRUE(fp32.finite) << what;
    return fp32;
  }

  // Judges a free run by its arithmetic alone. Prints where it decided otherwise than FP32; the
  // first such decision, if a routing one, must have been a near tie, and so must every one that
  // FP32 made to take the run's decisions would itself have taken otherwise in the same state.
  // Returns the run's agreement with that FP32 run. (Block selections keep no gap; a kernel that
  // chose wrong blocks fails attention_cuda_test.)
  static Agreement JudgeFreeRun(const std::string& what, const Reference& ref, const std::vector<float>& logits,
                                const Decisions& taken) {
    const std::string differences = DecisionDifferences(taken, ref.fp32_decisions);
    std::printf("%s, GPU decides otherwise than FP32: %s\n", what.c_str(),
                differences.empty() ? "nowhere" : differences.c_str());
    const FirstDifference first = FirstDecisionDifference(taken, ref.fp32_decisions);
    if (first.found && first.routing) {
      EXPECT_LE(first.reference.gap_in_fp16_ulps(), kFirstTieUlps)
          << what << ": the first decision taken otherwise than FP32 was no near tie: " << Describe(first);
    }
    auto cpu = MakeCpuBackend();
    const absl::StatusOr<DecidingAlike> alike = TeacherForcedDecidingAs(
        taken, ref.config, *ref.store, *cpu, ProbeSequence(kPositions, ref.config), kPrefill);
    EXPECT_TRUE(alike.ok()) << alike.status();
    if (!alike.ok()) return {};
    const float widest = WidestGapTakenOtherwise(taken, alike->own);
    std::printf("%s, GPU decides otherwise than FP32 would in the same state: widest gap %.1f FP16 ulps\n",
                what.c_str(), widest);
    EXPECT_LE(widest, kTieUlps) << what << ": a decision FP32 would have taken otherwise was no near tie";
    const int64_t V = ref.config.vocab_size;
    const Agreement got = CompareLogits(logits, alike->run.logits, V);
    std::printf("%s against FP32 deciding alike: %s\n", what.c_str(), Describe(got).c_str());
    std::printf("%s against FP32 deciding alike along the probe: %s\n", what.c_str(),
                ErrorAlongPositions(logits, alike->run.logits, V, 6).c_str());
    return got;
  }

  // Where the GPU and its reference decided alike (the run deciding as FP32, and a free run against
  // FP32 deciding as it did): the trained model carries the GPU bar of docs/contract.md §8.2, ≥ 99% top-1 agreement
  // over ≥ 512 positions and final logits within 2e-2. The random tiny model's top two logits
  // are often nearly tied, so there the contract's own emulation, deciding as FP32, stops at
  // 99.0–99.7% top-1 over all positions; the GPU must meet 99% over the positions whose reference
  // margin exceeds 1% (the emulation: 100%) and final logits within 2e-2, and pay no more than the
  // emulation does (`contract_aligned`): top-1 within 2 points of its (the spread two
  // implementations of the contract show over 600 positions), p90 logits error within 1.5×.
  static void ExpectAlikeBars(const std::string& what, Case c, const Agreement& got, const Reference& ref) {
    if (c == Case::kTrained) {
      EXPECT_GE(got.top1, 0.99) << what;
      EXPECT_LE(got.final_rel_error, 2e-2) << what;
      return;
    }
    const Agreement emulated = CompareLogits(ref.contract_aligned.logits, ref.fp32.logits, ref.config.vocab_size);
    EXPECT_GE(got.top1_decided, 0.99) << what;
    EXPECT_LE(got.final_rel_error, 2e-2) << what;
    EXPECT_GE(got.top1, emulated.top1 - 0.02) << what;
    EXPECT_LE(got.p90_rel_error, 1.5 * emulated.p90_rel_error) << what;
  }

  // A free run against FP32 itself, whose decisions it may take otherwise at near ties: no more
  // than the free emulation loses, top-1 within 2 points of its. On the tiny model also a p90
  // logits error within 1.5× of its; on the trained one the p90 is set by whether one near tie
  // went the other way (1.6e-3 without, 1.9e-2 with: docs/precision.md), which no implementation
  // of the contract controls.
  static void ExpectFreeBars(const std::string& what, Case c, const Agreement& got, const Reference& ref) {
    const Agreement emulated = CompareLogits(ref.contract.logits, ref.fp32.logits, ref.config.vocab_size);
    EXPECT_GE(got.top1, emulated.top1 - 0.02) << what;
    if (c != Case::kTrained) {
      EXPECT_LE(got.p90_rel_error, 1.5 * emulated.p90_rel_error) << what;
    }
  }

  // Every configuration runs free, as served but eagerly (DecodeGraphReplaysEqualEagerSteps ties
  // the graph to it bitwise), and deciding as FP32.
  static void ExpectAgreement(int tp, const std::string& comm = "auto") {
    // The trained model first: a rerun under a slow checker (scripts/gpu-run.sh) reaches it.
    for (Case c : {Case::kTrained, Case::kTinyDense, Case::kTinySparse}) {
      const Reference& ref = ReferenceFor(c);
      const std::string what = "TP" + std::to_string(tp) + (comm == "host" ? " on one GPU " : " ") + Name(c);
      DecisionRecorder decisions;
      const std::vector<TeacherForced> free = OnGpus(ref, {tp, comm, false, &decisions});
      ExpectFreeBars(what, c, Report(what, ref, free, ref.contract), ref);
      ExpectAlikeBars(what + " against FP32 deciding alike", c,
                      JudgeFreeRun(what, ref, free[0].logits, decisions.decisions()), ref);
      const std::string aligned_what = what + " deciding as FP32";
      const Agreement aligned =
          Report(aligned_what, ref, OnGpus(ref, {tp, comm, false, nullptr, &ref.fp32_decisions}), ref.contract_aligned);
      ExpectAlikeBars(aligned_what, c, aligned, ref);
    }
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

// The sharded model at TP2 where only one GPU is visible: both ranks on it, their collectives
// staged through host memory (NCCL refuses two ranks on one GPU). The kernels run at TP2's
// shapes as over NCCL; only the collectives differ: on the host and eager, not in the graph.
TEST_F(TinyOnGpu, Tp2OnOneGpuMatchesCpuReference) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  ExpectAgreement(2, "host");
}

// TP4 on one GPU, as the server's four workers on one GPU sum (the IPC route adds in rank order
// and rounds once, as this host-staged path does: tests/e2e/gpu_server_test.cc ties the two).
TEST_F(TinyOnGpu, Tp4OnOneGpuMatchesCpuReference) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  ExpectAgreement(4, "host");
}

// Greedy decoding's token on the device (Model::GreedyToken: ArgMax on the graph's logits buffer
// after each replay, the ranks' pairs all-gathered) equals the host's greedy over the gathered
// logits, step after step of a free greedy run through the decode graph; at TP2 the two ranks
// share one GPU through host memory (no graph there), or run over NCCL where two GPUs are.
TEST_F(TinyOnGpu, GreedyTokenEqualsHostGreedyThroughTheGraph) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  for (Case c : {Case::kTrained, Case::kTinyDense}) {
    const Reference& ref = ReferenceFor(c);
    for (const std::string comm : {"auto", "host"}) {
      const int tp = comm == "host" ? 2 : 1;
      LocalGroupOptions o;
      o.device = "cuda";
      o.cuda_comm = comm;
      o.model.decode_graph = comm == "auto";
      int64_t checked = 0;
      const absl::Status s = RunLocalGroup(ref.config, *ref.store, tp, [&](Model& m) -> absl::Status {
        SequenceState state = m.NewSequence(256);
        const std::vector<int32_t> probe = ProbeSequence(16, ref.config);
        ASSIGN_OR_RETURN(Buffer local, m.Forward(probe, state));
        const int64_t V = ref.config.vocab_size;
        for (int step = 0; step < 96; ++step) {
          ASSIGN_OR_RETURN(std::vector<float> all, m.GatherLogits(local));
          int32_t host = 0;
          float top = -INFINITY;
          for (int64_t i = 0; i < V; ++i) {
            if (all[i] > top) top = all[i], host = static_cast<int32_t>(i);
          }
          ASSIGN_OR_RETURN(int32_t device, m.GreedyToken(local, V));
          // A bound inside the vocabulary: the host's greedy below it.
          ASSIGN_OR_RETURN(int32_t bounded, m.GreedyToken(local, V / 2 + 1));
          int32_t host_bounded = 0;
          top = -INFINITY;
          for (int64_t i = 0; i < V / 2 + 1; ++i) {
            if (all[i] > top) top = all[i], host_bounded = static_cast<int32_t>(i);
          }
          if (m.comm().rank() == 0) {
            EXPECT_EQ(device, host) << Name(c) << " " << comm << " step " << step;
            EXPECT_EQ(bounded, host_bounded) << Name(c) << " " << comm << " step " << step;
            ++checked;
          }
          ASSIGN_OR_RETURN(local, m.Forward({device}, state));
        }
        return absl::OkStatus();
      }, o);
      EXPECT_TRUE(s.ok()) << s;
      EXPECT_EQ(checked, 96) << Name(c) << " " << comm;
    }
  }
}

TEST_F(TinyOnGpu, DecodeGraphReplaysEqualEagerSteps) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  // Same inputs, graph against eager, 536 decode steps; OnGpus poisons each step's output
  // buffer after reading it, so a replay that did not rewrite it would show NaN. The eager run
  // records its decisions through the hooks, which must leave it as it was. This ties the graph,
  // as served, to the eager free runs the agreement tests judge; at TP2 over NCCL (two GPUs)
  // all-reduces included.
  for (int tp = 1; tp <= std::min(Gpus(), 2); ++tp) {
    for (Case c : {Case::kTrained, Case::kTinyDense, Case::kTinySparse}) {
      const Reference& ref = ReferenceFor(c);
      const std::string what = "TP" + std::to_string(tp) + " " + Name(c);
      DecisionRecorder decisions;
      const std::vector<float> graph = OnGpus(ref, {tp, "auto", true})[0].logits;
      const std::vector<float> eager = OnGpus(ref, {tp, "auto", false, &decisions})[0].logits;
      ASSERT_EQ(graph.size(), eager.size()) << what;
      int64_t differing = 0;
      for (size_t i = 0; i < graph.size(); ++i) differing += std::memcmp(&graph[i], &eager[i], sizeof(float)) != 0;
      EXPECT_EQ(differing, 0) << what << ": of " << graph.size() << " logits over " << kPositions - kPrefill
                              << " decode steps";
    }
  }
}

}  // namespace
}  // namespace q38
