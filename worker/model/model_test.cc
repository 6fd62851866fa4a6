// The whole forward pass on the tiny geometry: cache consistency (one pass = prefill + decode =
// chunked prefill), tensor parallelism (TP2 and TP4 = TP1), every checkpoint format the loader
// reads, and the errors a broken checkpoint must produce.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <utility>

#include <gtest/gtest.h>

#include "common/status.h"
#include "tools/checkpoint/checkpoint_generator.h"
#include "tools/checkpoint/checkpoint_quantizer.h"
#include "tools/precision/agreement.h"
#include "tools/precision/decision_record.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/checkpoint/safetensors_writer.h"
#include "worker/checkpoint/test_files.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"

namespace q38 {
namespace {

using testing_files::ScratchDir;

// A prompt long enough that QSA selects sparsely (budget 16 tokens = 4 blocks) and that contains
// EOS (1000), which cuts the PLE n-gram history.
std::vector<int32_t> Prompt() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 45; ++i) ids.push_back((i * 37 + 11) % 1000);
  ids[20] = 1000;
  return ids;
}

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      ADD_FAILURE() << "non-finite logit at " << i << ": " << a[i] << " vs " << b[i];
      return INFINITY;
    }
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  return diff / ref;
}

struct Loaded {
  std::unique_ptr<TensorStore> store;
  ModelConfig config;
};

Loaded Open(const std::string& dir) {
  auto config = LoadModelConfig(dir);
  EXPECT_TRUE(config.ok()) << config.status();
  auto store = TensorStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return {std::move(*store), *config};
}

// Runs `fn(model, state)` on every rank of a TP group (threads), returning rank 0's result.
template <typename Fn>
auto OnRanks(const Loaded& l, int tp, Fn fn, const LocalGroupOptions& options = {}) {
  decltype(fn(std::declval<Model&>(), std::declval<SequenceState&>())) out{};
  absl::Status s = RunLocalGroup(l.config, *l.store, tp, [&](Model& model) {
    SequenceState state = model.NewSequence(256);
    auto r = fn(model, state);
    if (model.comm().rank() == 0) out = std::move(r);
    return absl::OkStatus();
  }, options);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Feeds `ids` in chunks of at most `chunk` tokens; the full-vocabulary logits of the last token.
absl::StatusOr<std::vector<float>> Prefill(Model& m, SequenceState& s, const std::vector<int32_t>& ids, int64_t chunk) {
  Buffer logits;
  for (size_t begin = 0; begin < ids.size(); begin += chunk) {
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(chunk));
    ASSIGN_OR_RETURN(logits, m.Forward(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), s));
  }
  return m.GatherLogits(logits);
}

// Logits of every prompt position from one forward pass.
std::vector<float> AllPositions(Model& m, SequenceState& s, const std::vector<int32_t>& ids) {
  auto local = m.Forward(ids, s, static_cast<int64_t>(ids.size()));
  EXPECT_TRUE(local.ok()) << local.status();
  return *m.GatherLogits(*local);
}

// Logits of every prompt position, one token at a time (the decode path).
std::vector<float> TokenByToken(Model& m, SequenceState& s, const std::vector<int32_t>& ids) {
  std::vector<float> all;
  for (int32_t id : ids) {
    auto local = m.Forward({id}, s);
    EXPECT_TRUE(local.ok()) << local.status();
    auto logits = m.GatherLogits(*local);
    all.insert(all.end(), logits->begin(), logits->end());
  }
  return all;
}

class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 7}, dir_->path()).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static ScratchDir* dir_;
};
ScratchDir* TinyModel::dir_ = nullptr;

TEST_F(TinyModel, DecodeEqualsOnePass) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  auto one = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); });
  auto steps = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return TokenByToken(m, s, prompt); });
  EXPECT_LE(RelErr(steps, one), 1e-5);
}

TEST_F(TinyModel, PrefillThenDecodeEqualsOnePass) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  auto one = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); });
  const int64_t V = l.config.vocab_size;
  for (int k : {1, 4, 21, 30}) {
    auto mixed = OnRanks(l, 1, [&](Model& m, SequenceState& s) {
      std::vector<float> out = AllPositions(m, s, {prompt.begin(), prompt.begin() + k});
      std::vector<float> rest = TokenByToken(m, s, {prompt.begin() + k, prompt.end()});
      out.insert(out.end(), rest.begin(), rest.end());
      return out;
    });
    EXPECT_LE(RelErr(mixed, one), 1e-5) << "prefill " << k;
    EXPECT_EQ(mixed.size(), prompt.size() * V);
  }
}

TEST_F(TinyModel, ChunkedPrefillEqualsOnePass) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  auto one = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return *Prefill(m, s, prompt, 8192); });
  for (int chunk : {1, 3, 8, 17}) {
    auto chunked = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return *Prefill(m, s, prompt, chunk); });
    EXPECT_LE(RelErr(chunked, one), 1e-5) << "chunk " << chunk;
  }
}

TEST_F(TinyModel, TensorParallelEqualsSingleRank) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  auto tp1 = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); });
  for (int tp : {2, 4}) {
    auto tpn = OnRanks(l, tp, [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); });
    EXPECT_LE(RelErr(tpn, tp1), 1e-5) << "TP" << tp;
    auto greedy = OnRanks(l, tp, [&](Model& m, SequenceState& s) { return GenerateGreedy(m, prompt, 12, 16)->tokens; });
    auto greedy1 = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return GenerateGreedy(m, prompt, 12, 16)->tokens; });
    EXPECT_EQ(greedy, greedy1) << "TP" << tp;
  }
}

// Greedy decoding's rank-local reduction (Model::GreedyToken) takes the same token as the host's
// greedy over the gathered logits (worker/sampling/sampler.h, step 1): on the model's own logits
// at TP 1, 2 and 4, and on hand-made rows with ties across ranks, NaN, ±inf and a valid-vocabulary
// bound.
int32_t HostGreedy(const std::vector<float>& logits, int64_t valid_vocab) {
  const int64_t n = std::clamp<int64_t>(valid_vocab, 1, static_cast<int64_t>(logits.size()));
  int32_t best = 0;
  float top = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] > top) {
      top = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

TEST_F(TinyModel, GreedyTokenEqualsHostGreedyOverGatheredLogits) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  const int64_t V = l.config.vocab_size;
  for (int tp : {1, 2, 4}) {
    auto pairs = OnRanks(l, tp, [&](Model& m, SequenceState& s) {
      std::vector<std::pair<int32_t, int32_t>> got;  // (GreedyToken, host greedy) per step and bound
      std::vector<int32_t> ids = {prompt.begin(), prompt.begin() + 8};
      for (int step = 0; step < 6; ++step) {
        auto local = m.Forward(ids, s);
        EXPECT_TRUE(local.ok()) << local.status();
        const std::vector<float> all = *m.GatherLogits(*local);
        for (int64_t valid : {V, V - 1, V / 2 + 3, int64_t{1}, int64_t{0}, V + 9}) {
          got.emplace_back(*m.GreedyToken(*local, valid), HostGreedy(all, valid));
        }
        ids = {got[got.size() - 6].first};
      }
      return got;
    });
    ASSERT_EQ(pairs.size(), 36u) << "TP" << tp;
    for (size_t i = 0; i < pairs.size(); ++i) EXPECT_EQ(pairs[i].first, pairs[i].second) << "TP" << tp << " case " << i;
  }

  // Hand-made rows: V = 1024 split over the ranks.
  std::vector<std::vector<float>> rows;
  auto row = [&](float fill) { return std::vector<float>(V, fill); };
  {
    auto r = row(-1.0f);  // a tie straddling the rank boundary: the lower id wins
    r[V / 2 + 5] = 3.0f, r[V / 2 - 1] = 3.0f, r[V / 4 + 1] = 3.0f, r[V - 1] = 3.0f;
    rows.push_back(r);
  }
  {
    auto r = row(NAN);  // NaN everywhere but two ids: NaN never wins
    r[700] = -5.0f, r[3] = -6.0f;
    rows.push_back(r);
  }
  rows.push_back(row(-INFINITY));  // nothing above −inf: 0
  rows.push_back(row(NAN));
  {
    auto r = row(0.0f);  // +inf wins, the first of two
    r[600] = INFINITY, r[900] = INFINITY, r[10] = 1e30f;
    rows.push_back(r);
  }
  {
    auto r = row(0.0f);  // the largest beyond the valid bound never wins
    r[V - 2] = 9.0f, r[V / 2 + 1] = 2.0f;
    rows.push_back(r);
  }
  for (int tp : {1, 2, 4}) {
    auto got = OnRanks(l, tp, [&](Model& m, SequenceState&) {
      std::vector<int32_t> tokens;
      const int64_t Vl = V / m.comm().size();
      for (const auto& r : rows) {
        for (int64_t valid : {V, V - 3, V / 2 + 2, int64_t{2}}) {
          std::vector<float> part(r.begin() + m.comm().rank() * Vl, r.begin() + (m.comm().rank() + 1) * Vl);
          Buffer local = m.backend().UploadF32(part, {1, Vl});
          tokens.push_back(*m.GreedyToken(local, valid));
        }
      }
      return tokens;
    });
    size_t i = 0;
    for (const auto& r : rows) {
      for (int64_t valid : {V, V - 3, V / 2 + 2, int64_t{2}}) {
        ASSERT_LT(i, got.size());
        EXPECT_EQ(got[i], HostGreedy(r, valid)) << "TP" << tp << " row " << i / 4 << " valid " << valid;
        ++i;
      }
    }
  }
}

// The activations every rank computes in full (from the all-reduced sums) stay bitwise equal
// across ranks: the indexer keys of each attention layer, at every position of a prefill and
// the decode steps after it; and they follow TP1's.
TEST_F(TinyModel, RanksKeepTheReplicatedStateBitwiseEqual) {
  const Loaded l = Open(dir_->path());
  const std::vector<int32_t> ids = ProbeSequence(48, l.config);
  std::vector<TeacherForced> ranks(2);
  ASSERT_TRUE(RunLocalGroup(l.config, *l.store, 2, [&](Model& m) -> absl::Status {
    ASSIGN_OR_RETURN(ranks[m.comm().rank()], TeacherForcedRun(m, ids, 16));
    return absl::OkStatus();
  }).ok());
  auto cpu = MakeCpuBackend();
  const absl::StatusOr<TeacherForced> tp1 = TeacherForcedOnBackend(l.config, *l.store, *cpu, ids, 16);
  ASSERT_TRUE(tp1.ok()) << tp1.status();
  ASSERT_EQ(ranks[0].attention_layers, (std::vector<int>{3, 7}));
  ASSERT_EQ(ranks[1].index_keys.size(), 2u);
  const int64_t di = l.config.indexer_head_dim;
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(ranks[0].index_keys[k].size(), ids.size() * di);
    EXPECT_EQ(FirstDifferingRow(ranks[1].index_keys[k], ranks[0].index_keys[k], di), -1) << "layer " << k;
    EXPECT_LE(RelErr(ranks[0].index_keys[k], tp1->index_keys[k]), 1e-5) << "layer " << k;
  }
  EXPECT_LE(RelErr(ranks[0].logits, tp1->logits), 1e-5);
}

// The hooks see every routing and block-selection decision of a prefill and the steps after it;
// one flipped routing decision leaves every earlier position's logits as they were and changes its
// own; a run steered onto another's decisions takes them all; a decode graph refuses the hooks.
TEST_F(TinyModel, DecisionsAreObservedFlippedAndFollowed) {
  const Loaded l = Open(dir_->path());
  const std::vector<int32_t> ids = ProbeSequence(24, l.config);  // sparse selection from position 19
  auto cpu = MakeCpuBackend();
  DecisionRecorder plain_decisions, flipped_decisions, steered_decisions;
  ModelOptions plain, flipped, steered;
  InstallDecisionHooks(plain, {.record = &plain_decisions});
  InstallDecisionHooks(flipped, {.alter = FlipToRunnerUp(1, 14), .record = &flipped_decisions});
  const auto a = TeacherForcedOnBackend(l.config, *l.store, *cpu, ids, 8, plain);
  const auto b = TeacherForcedOnBackend(l.config, *l.store, *cpu, ids, 8, flipped);
  ASSERT_TRUE(a.ok() && b.ok());
  const Decisions p = plain_decisions.decisions(), f = flipped_decisions.decisions();
  EXPECT_EQ(p.routes.size(), static_cast<size_t>(l.config.num_layers) * ids.size());
  EXPECT_EQ(p.selections.size(), 2 * ids.size());  // two attention layers
  EXPECT_EQ(DecisionDifferences(f, p).rfind("experts at layer 1 position 14 ", 0), 0u);
  const FirstDifference first = FirstDecisionDifference(f, p);
  EXPECT_TRUE(first.found && first.routing);
  EXPECT_EQ(first.key, (DecisionKey{1, 14}));
  EXPECT_EQ(first.reference.gap, p.routes.at({1, 14}).gap);
  const int64_t V = l.config.vocab_size;
  EXPECT_EQ(std::vector<float>(a->logits.begin(), a->logits.begin() + 14 * V),
            std::vector<float>(b->logits.begin(), b->logits.begin() + 14 * V));
  EXPECT_NE(std::vector<float>(a->logits.begin() + 14 * V, a->logits.begin() + 15 * V),
            std::vector<float>(b->logits.begin() + 14 * V, b->logits.begin() + 15 * V));
  // Steered onto the flipped run's decisions, a plain run computes the flipped run's logits.
  InstallDecisionHooks(steered, {.follow = &f, .record = &steered_decisions});
  const auto c = TeacherForcedOnBackend(l.config, *l.store, *cpu, ids, 8, steered);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(DecisionDifferences(steered_decisions.decisions(), f), "");
  EXPECT_LE(RelErr(c->logits, b->logits), 1e-6);
  ModelOptions graph = plain;
  graph.decode_graph = true;
  EXPECT_EQ(TeacherForcedOnBackend(l.config, *l.store, *cpu, ids, 8, graph).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The runner's ranks joined by Gloo over loopback, as the server's worker processes are: the same
// model as through the in-process collectives (only the reduction order may differ).
TEST_F(TinyModel, GlooGroupEqualsInProcessGroup) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  LocalGroupOptions gloo;
  gloo.cpu_comm = "gloo";
  auto all = [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); };
  auto over_gloo = OnRanks(l, 4, all, gloo);
  ASSERT_FALSE(over_gloo.empty());
  EXPECT_LE(RelErr(over_gloo, OnRanks(l, 4, all)), 1e-5);
  LocalGroupOptions unknown;
  unknown.cpu_comm = "mpi";
  EXPECT_EQ(RunLocalGroup(l.config, *l.store, 2, [](Model&) { return absl::OkStatus(); }, unknown).message(),
            "cpu_comm: expected inprocess, shm or gloo, got mpi");
}

// The logits of every prompt position on `tp` ranks with `options` are bitwise those of the
// default group (in-process collectives, one thread a rank).
void ExpectBitwiseTheDefaultGroup(const Loaded& l, const std::vector<int32_t>& prompt, int tp,
                                  const LocalGroupOptions& options) {
  auto all = [&](Model& m, SequenceState& s) { return AllPositions(m, s, prompt); };
  auto got = OnRanks(l, tp, all, options);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got, OnRanks(l, tp, all));
}

// The runner's ranks joined by shared memory, as the server's worker processes are by default:
// the sums add in rank order as the in-process group's do.
TEST_F(TinyModel, SharedMemoryGroupIsBitwiseTheInProcessGroup) {
  LocalGroupOptions shm;
  shm.cpu_comm = "shm";
  ExpectBitwiseTheDefaultGroup(Open(dir_->path()), Prompt(), 4, shm);
}

// Ranks 1.. as processes of their own, as the server's workers are: the same bits as threads.
TEST_F(TinyModel, RanksAsProcessesAreBitwiseTheInProcessGroup) {
  LocalGroupOptions processes;
  processes.cpu_comm = "shm";
  processes.processes = true;
  ExpectBitwiseTheDefaultGroup(Open(dir_->path()), Prompt(), 4, processes);
  // A rank process that fails makes the group fail, naming it.
  const Loaded l = Open(dir_->path());
  const absl::Status s = RunLocalGroup(l.config, *l.store, 2, [](Model& m) -> absl::Status {
    return m.comm().rank() == 1 ? absl::DataLossError("bad shard") : absl::OkStatus();
  }, processes);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("rank 1: rank process"), std::string::npos) << s;
  EXPECT_NE(s.message().find("exited with 1"), std::string::npos) << s;
  LocalGroupOptions in_process;
  in_process.processes = true;
  EXPECT_TRUE(absl::IsInvalidArgument(RunLocalGroup(l.config, *l.store, 2, [](Model&) { return absl::OkStatus(); },
                                                    in_process)));
}

// Threads inside a fast CPU rank split its products by rows: no bit changes.
TEST_F(TinyModel, ThreadsInsideARankChangeNoBit) {
  LocalGroupOptions threaded;
  threaded.cpu_threads = 3;
  ExpectBitwiseTheDefaultGroup(Open(dir_->path()), Prompt(), 1, threaded);
}

// A rank that fails on its own leaves the others to time out on the collective: the group's error
// leads with the cause, not with the wait, and names every failing rank.
TEST_F(TinyModel, GroupErrorLeadsWithTheRankThatFailedFirst) {
  const Loaded l = Open(dir_->path());
  const absl::Status s = RunLocalGroup(l.config, *l.store, 4, [](Model& m) -> absl::Status {
    if (m.comm().rank() == 2) return absl::InvalidArgumentError("GPU 2 requested; this process sees 1");
    if (m.comm().rank() == 0) return absl::DeadlineExceededError("the group did not form");
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), "rank 2: GPU 2 requested; this process sees 1; rank 0: the group did not form");
  EXPECT_EQ(RunLocalGroup(l.config, *l.store, 2, [](Model& m) -> absl::Status {
              return m.comm().rank() == 1 ? absl::DataLossError("bad shard") : absl::OkStatus();
            }).ToString(),
            "DATA_LOSS: rank 1: bad shard");
}

// Options that cannot work are refused before any rank starts: an unknown transport, and the
// decode graph with host-staged collectives, whose synchronous copies a graph cannot record.
TEST_F(TinyModel, LocalGroupRefusesOptionsThatCannotWork) {
  const Loaded l = Open(dir_->path());
  const auto never = [](Model&) { return absl::InternalError("a rank started"); };
  LocalGroupOptions o;
  o.device = "cuda";
  o.cuda_comm = "shm";
  EXPECT_EQ(RunLocalGroup(l.config, *l.store, 2, never, o).ToString(),
            "INVALID_ARGUMENT: cuda_comm: expected auto, ipc, nccl or host, got shm");
  o.cuda_comm = "host";
  o.model.decode_graph = true;
  EXPECT_EQ(RunLocalGroup(l.config, *l.store, 2, never, o).ToString(),
            "INVALID_ARGUMENT: cuda_comm host: its synchronous copies cannot be recorded in the decode graph");
}

TEST_F(TinyModel, ResetStartsOver) {
  const Loaded l = Open(dir_->path());
  const auto prompt = Prompt();
  auto twice = OnRanks(l, 1, [&](Model& m, SequenceState& s) {
    std::vector<float> a = *Prefill(m, s, prompt, 16);
    m.Reset(s);
    std::vector<float> b = *Prefill(m, s, prompt, 16);
    return RelErr(a, b);
  });
  EXPECT_EQ(twice, 0.0);
}

TEST_F(TinyModel, ForwardRejectsBadInput) {
  const Loaded l = Open(dir_->path());
  auto errors = OnRanks(l, 1, [&](Model& m, SequenceState& s) {
    std::vector<std::string> out;
    out.push_back(std::string(m.Forward({}, s).status().message()));
    out.push_back(std::string(m.Forward({1024}, s).status().message()));
    out.push_back(std::string(m.Forward({-1}, s).status().message()));
    out.push_back(std::string(m.Forward(std::vector<int32_t>(300, 1), s).status().message()));
    return out;
  });
  EXPECT_EQ(errors[0], "forward: no tokens");
  EXPECT_EQ(errors[1], "forward: token id 1024 outside the vocabulary");
  EXPECT_EQ(errors[2], "forward: token id -1 outside the vocabulary");
  EXPECT_EQ(errors[3], "forward: 300 tokens exceed the cache capacity of 256");
}

TEST(Generator, DeterministicByteForByte) {
  ScratchDir a, b, c;
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 3}, a.path()).ok());
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 3}, b.path()).ok());
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 4}, c.path()).ok());
  for (const char* f : {"model.safetensors", "config.json", "generation_config.json", "hf_quant_config.json"}) {
    EXPECT_EQ(testing_files::ReadFile(a.File(f)), testing_files::ReadFile(b.File(f))) << f;
  }
  EXPECT_NE(testing_files::ReadFile(a.File("model.safetensors")), testing_files::ReadFile(c.File("model.safetensors")));
}

// q38-quantize's conversion: BF16 experts kept as BF16 give the same logits as the source;
// NVFP4 experts give logits that differ, but only by quantization noise.
TEST(Quantizer, Bf16AndNvfp4ExportsLoadAndRun) {
  ScratchDir src, bf16, nvfp4;
  GeneratorOptions o{.seed = 9, .nvfp4_experts = false, .fp8_ple = false};
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), o, src.path()).ok());
  absl::Status s = QuantizeCheckpoint(src.path(), bf16.path(), {.nvfp4_experts = false});
  ASSERT_TRUE(s.ok()) << s;
  s = QuantizeCheckpoint(src.path(), nvfp4.path(), {.nvfp4_experts = true});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(std::filesystem::exists(nvfp4.File("hf_quant_config.json")));
  EXPECT_EQ(testing_files::ReadFile(src.File("tokenizer.json")), testing_files::ReadFile(nvfp4.File("tokenizer.json")));
  auto logits = [](const std::string& dir, int tp) {
    const Loaded l = Open(dir);
    return OnRanks(l, tp, [&](Model& m, SequenceState& st) { return *Prefill(m, st, Prompt(), 16); });
  };
  const std::vector<float> ref = logits(src.path(), 1);
  EXPECT_EQ(logits(bf16.path(), 1), ref);
  // Random weights under a sharp router: quantization noise flips a few routing decisions, so
  // the bound is loose; the sharded model must still agree with the unsharded one.
  const std::vector<float> q1 = logits(nvfp4.path(), 1);
  EXPECT_GT(RelErr(q1, ref), 0.0);
  EXPECT_LT(RelErr(q1, ref), 0.5);
  EXPECT_LT(RelErr(logits(nvfp4.path(), 2), q1), 1e-5);
}

TEST(Generator, OfficialBf16LayoutLoadsAndRuns) {
  ScratchDir dir;
  GeneratorOptions o{.seed = 5, .nvfp4_experts = false, .fp8_ple = false};
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), o, dir.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("hf_quant_config.json")));
  const Loaded l = Open(dir.path());
  for (int tp : {1, 2}) {
    auto logits = OnRanks(l, tp, [&](Model& m, SequenceState& s) { return *Prefill(m, s, Prompt(), 16); });
    ASSERT_EQ(logits.size(), 1024u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(Generator, ShardedCheckpointLoads) {
  ScratchDir dir;
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 3, .max_shard_bytes = 1 << 20}, dir.path()).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.File("model.safetensors.index.json")));
  const Loaded l = Open(dir.path());
  auto logits = OnRanks(l, 1, [&](Model& m, SequenceState& s) { return *Prefill(m, s, Prompt(), 64); });
  EXPECT_EQ(logits.size(), 1024u);
}

// Rewrites the single-file checkpoint of `dir` with `edit` applied to its tensors.
void EditTensors(const std::string& dir, const std::function<void(std::vector<TensorData>&)>& edit) {
  std::vector<TensorData> tensors;
  {
    auto file = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    for (const TensorView& v : (*file)->tensors()) {
      tensors.push_back({v.name, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)});
    }
  }
  edit(tensors);
  SafetensorsWriter w;
  for (auto& t : tensors) w.Add(std::move(t));
  ASSERT_TRUE(w.Write(dir + "/model.safetensors").ok());
}

std::string LoadError(const std::string& dir, int tp = 1) {
  auto config = LoadModelConfig(dir);
  if (!config.ok()) return std::string(config.status().message());
  auto store = TensorStore::Open(dir);
  if (!store.ok()) return std::string(store.status().message());
  auto backend = MakeCpuBackend();
  auto w = LoadWeights(*config, **store, *backend, {0, tp});
  return w.ok() ? "ok" : std::string(w.status().message());
}

TEST(LoadErrors, NameWhatIsWrong) {
  const std::string L1 = "model.language_model.layers.1.";
  struct Case {
    std::string what;
    std::function<void(std::vector<TensorData>&)> edit;
    std::string expected;
  };
  auto find = [](std::vector<TensorData>& ts, const std::string& name) -> TensorData& {
    for (auto& t : ts) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no tensor " << name;
    return ts.front();
  };
  const std::vector<Case> cases = {
      {"missing", [&](auto& ts) { std::erase_if(ts, [&](auto& t) { return t.name == L1 + "linear_attn.A_log"; }); },
       "checkpoint: missing tensor " + L1 + "linear_attn.A_log"},
      {"extra", [&](auto& ts) { ts.push_back({L1 + "linear_attn.surprise", DType::kF32, {1}, {0, 0, 0, 0}}); },
       "checkpoint: unexpected tensor(s) " + L1 + "linear_attn.surprise"},
      {"shape", [&](auto& ts) { auto& t = find(ts, L1 + "linear_attn.dt_bias"); t.shape = {4, 2}; },
       "checkpoint: tensor " + L1 + "linear_attn.dt_bias in"},
      {"dtype", [&](auto& ts) { auto& t = find(ts, L1 + "linear_attn.dt_bias"); t.dtype = DType::kI32; t.bytes.resize(32); },
       "has dtype I32, expected BF16 or F16 or F32"},
      {"hash", [&](auto& ts) { find(ts, L1 + "ple.ple_embedding.layer_multipliers").bytes[0] ^= 2; },
       "checkpoint: tensor " + L1 + "ple.ple_embedding.layer_multipliers[0] = "},
      {"expert codes dtype", [&](auto& ts) { find(ts, "model.language_model.layers.0.mlp.experts.3.up_proj.weight").dtype = DType::kF8E4M3; },
       "model.language_model.layers.0.mlp.experts.3.up_proj.weight"},
  };
  for (const Case& c : cases) {
    ScratchDir dir;
    ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 1}, dir.path()).ok());
    EditTensors(dir.path(), c.edit);
    const std::string err = LoadError(dir.path());
    EXPECT_NE(err.find(c.expected), std::string::npos) << c.what << ": " << err;
  }
}

TEST(LoadErrors, GeometryTheConfigCannotSplit) {
  ScratchDir dir;
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 1}, dir.path()).ok());
  EXPECT_EQ(LoadError(dir.path(), 3), "tensor parallelism: vocab_size (1024) is not divisible by the TP size 3");
  EXPECT_EQ(LoadError(dir.path(), 8), "tensor parallelism: linear_num_key_heads (4) is not divisible by the TP size 8");
}

TEST(LoadErrors, ConfigThatDisagreesWithTheCheckpoint) {
  ScratchDir dir;
  ModelConfig wide = TinyModelConfig();
  ASSERT_TRUE(GenerateCheckpoint(wide, {.seed = 1}, dir.path()).ok());
  wide.num_experts = 16;
  testing_files::WriteFile(dir.File("config.json"), ModelConfigJson(wide));
  EXPECT_NE(LoadError(dir.path()).find("mlp.gate.weight"), std::string::npos) << LoadError(dir.path());
}

TEST(LoadErrors, TruncatedFile) {
  ScratchDir dir;
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 1}, dir.path()).ok());
  std::filesystem::resize_file(dir.File("model.safetensors"), 100000);
  const std::string err = LoadError(dir.path());
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

}  // namespace
}  // namespace q38
