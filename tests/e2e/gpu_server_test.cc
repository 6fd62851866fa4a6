// The server end to end on GPUs: real q38-server and q38-worker processes with --device cuda at
// TP1, TP2 with a GPU each (NCCL, skipped without a second GPU), and TP2 and TP4 with every worker
// on one GPU (CUDA IPC, --gpus 0,0,...), generating the same tokens as the in-process runner;
// a dead rank failing the request; a graceful stop, and a killed worker, giving the GPU memory
// back. Skipped where no GPU is visible.
#include <cuda_runtime.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "tests/e2e/server_harness.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"

namespace q38::e2e {
namespace {

const std::vector<int32_t> kPrompt = {1000, 17, 99, 512, 3, 77, 250, 901, 42, 7, 640, 11, 5, 300, 21, 88, 123, 456};

int Gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Output lines of a command.
std::vector<std::string> Lines(const std::string& cmd) {
  std::vector<std::string> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[512];
  while (fgets(line, sizeof(line), p) != nullptr) out.emplace_back(line);
  pclose(p);
  return out;
}

// Device memory in use on GPU g, MiB, as the driver reports it (whatever process holds it).
int64_t UsedMib(int g) {
  const auto lines = Lines("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i " + std::to_string(g));
  int64_t v = -1;
  if (lines.empty() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(lines[0]), &v)) return -1;
  return v;
}

// PIDs the driver lists as holding GPU memory (empty inside a PID namespace that hides them).
std::vector<pid_t> GpuPids() {
  std::vector<pid_t> pids;
  for (const std::string& l : Lines("nvidia-smi --query-compute-apps=pid --format=csv,noheader")) {
    int p;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(l), &p)) pids.push_back(p);
  }
  return pids;
}

// Where a server's ranks run: a GPU each, or every one on GPU 0.
struct Placement {
  int tp = 1;
  bool one_gpu = false;
  int gpus_needed() const { return one_gpu ? 1 : tp; }
  std::vector<int> gpus() const {
    std::vector<int> g;
    for (int r = 0; r < (one_gpu ? 1 : tp); ++r) g.push_back(r);
    return g;
  }
  std::vector<std::string> flags() const {
    std::vector<std::string> f = {"--device=cuda"};
    if (one_gpu) {
      std::string list;
      for (int r = 0; r < tp; ++r) list += r == 0 ? "0" : ",0";
      f.push_back("--gpus=" + list);
    }
    return f;
  }
  std::string name() const { return "Tp" + std::to_string(tp) + (one_gpu ? "OnOneGpu" : ""); }
};

// Waits for GPU g's memory in use to come back to `before` (within other tenants' noise).
void ExpectMemoryBack(int g, int64_t before) {
  // The driver frees a context's memory as its process goes.
  int64_t after = UsedMib(g);
  for (int i = 0; i < 50 && after > before + 64; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = UsedMib(g);
  }
  EXPECT_LE(after, before + 64) << "GPU " << g << ": " << before << " MiB before, " << after << " after";
}

// The in-process runner's greedy tokens: a GPU per rank, or (for ranks that share one) every rank
// on GPU 0 staged through host memory and run eagerly, whose sums the IPC route's match bit for bit.
std::vector<int32_t> RunnerGreedyOnGpus(int n, const Placement& at, const std::string& model = TinyCheckpoint()) {
  const int tp = at.tp;
  const ModelConfig config = *LoadModelConfig(model);
  auto store = *TensorStore::Open(model);
  std::vector<int32_t> tokens;
  LocalGroupOptions o{.device = "cuda", .model = {.decode_graph = true}};
  if (at.one_gpu && tp > 1) {
    o.cuda_comm = "host";
    o.model.decode_graph = false;
  }
  absl::Status s = RunLocalGroup(config, *store, tp, [&](Model& m) -> absl::Status {
    auto r = GenerateGreedy(m, kPrompt, n, 8192);
    if (!r.ok()) return r.status();
    if (m.comm().rank() == 0) tokens = r->tokens;
    return absl::OkStatus();
  }, o);
  EXPECT_TRUE(s.ok()) << s;
  return tokens;
}

// The CPU reference's logprob of each of `tokens` after the prompt and the tokens before it
// (teacher-forced), at TP1 over the tiny checkpoint.
std::vector<float> CpuLogprobs(const std::vector<int32_t>& tokens) {
  const ModelConfig config = *LoadModelConfig(TinyCheckpoint());
  auto store = *TensorStore::Open(TinyCheckpoint());
  std::vector<float> out;
  absl::Status s = RunLocalGroup(config, *store, 1, [&](Model& m) -> absl::Status {
    SequenceState st = m.NewSequence(static_cast<int64_t>(kPrompt.size() + tokens.size()) + 1);
    std::vector<int32_t> ids = kPrompt;
    for (int32_t token : tokens) {
      ASSIGN_OR_RETURN(Buffer local, m.Forward(ids, st));
      ASSIGN_OR_RETURN(cpu::LogitsSummary summary, m.SummarizeLogits(local, config.vocab_size, 1));
      ASSIGN_OR_RETURN(std::vector<float> logits, m.GatherLogits(local));
      out.push_back(static_cast<float>(logits[token] - summary.log_sum_exp));
      ids = {token};
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

class GpuServer : public ::testing::TestWithParam<Placement> {};

TEST_P(GpuServer, GeneratesTheRunnersTokensAndGivesTheGpusBack) {
  const Placement at = GetParam();
  const int tp = at.tp;
  if (Gpus() < at.gpus_needed()) GTEST_SKIP() << "needs " << at.gpus_needed() << " GPUs";
  std::vector<int64_t> before;
  for (int g : at.gpus()) before.push_back(UsedMib(g));
  std::vector<int32_t> served;
  std::vector<pid_t> workers;
  {
    Server s({.tp = tp, .comm_timeout_ms = 10000, .extra_flags = at.flags()});
    ASSERT_TRUE(s.ready());
    workers = s.WorkerPids();
    ASSERT_EQ(static_cast<int>(workers.size()), tp);
    v1::GenerateRequest req = TokensRequest(kPrompt, 48);
    req.set_ignore_eos(true);
    Streamed out = Generate(s.api(), req);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    served = out.tokens;
    // Log probabilities reduced on the device: the greedy token first among 5, every logprob
    // within FP16's reach of the CPU reference's on the same tokens, no token changed.
    req.set_max_tokens(16);
    req.set_logprobs(5);
    Streamed with = Generate(s.api(), req);
    ASSERT_TRUE(with.status.ok()) << with.status.error_message();
    EXPECT_EQ(with.tokens, std::vector<int32_t>(served.begin(), served.begin() + 16));
    ASSERT_EQ(with.logprobs.size(), 16u);
    const std::vector<float> cpu = CpuLogprobs(with.tokens);
    for (size_t i = 0; i < with.logprobs.size(); ++i) {
      const v1::TokenLogprob& lp = with.logprobs[i];
      ASSERT_EQ(lp.top_size(), 5) << i;
      EXPECT_EQ(lp.top(0).id(), lp.id()) << i;
      EXPECT_EQ(lp.top(0).logprob(), lp.logprob()) << i;
      EXPECT_NEAR(lp.logprob(), cpu[i], 0.05) << "token " << i;
    }
    for (size_t k = 0; k < before.size(); ++k) {
      EXPECT_GT(UsedMib(at.gpus()[k]), before[k]) << "GPU " << at.gpus()[k] << " shows no worker memory";
    }
    EXPECT_EQ(s.SignalAndWait(SIGTERM), 0);
  }
  EXPECT_TRUE(AllGone(workers, 5000));
  for (pid_t p : GpuPids()) {
    for (pid_t w : workers) EXPECT_NE(p, w) << "worker " << w << " still holds GPU memory";
  }
  for (size_t k = 0; k < before.size(); ++k) ExpectMemoryBack(at.gpus()[k], before[k]);
  EXPECT_EQ(served, RunnerGreedyOnGpus(48, at));
}

INSTANTIATE_TEST_SUITE_P(Placements, GpuServer,
                         ::testing::Values(Placement{1, false}, Placement{2, false}, Placement{2, true},
                                           Placement{4, true}),
                         [](const ::testing::TestParamInfo<Placement>& p) { return p.param.name(); });

// The trained small model at TP4 with every worker on GPU 0: the served greedy tokens are the
// runner's four ranks staged through host memory (the same sums, bit for bit), whose agreement
// with FP32 at TP4 model_cuda_test holds to the bars.
TEST(GpuServerSmallModel, Tp4OnOneGpuGeneratesTheHostStagedRunnersTokens) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU";
  const char* source = std::getenv("Q38_SOURCE_DIR");
  if (source == nullptr) GTEST_SKIP() << "Q38_SOURCE_DIR (the checkout holding models/small) is not set";
  const std::string model = std::string(source) + "/models/small";
  const Placement at{4, true};
  std::vector<int32_t> served;
  {
    Server s({.tp = 4, .comm_timeout_ms = 10000, .extra_flags = at.flags(), .model = model});
    ASSERT_TRUE(s.ready());
    v1::GenerateRequest req = TokensRequest(kPrompt, 32);
    req.set_ignore_eos(true);
    Streamed out = Generate(s.api(), req);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    served = out.tokens;
    EXPECT_EQ(s.SignalAndWait(SIGTERM), 0);
  }
  EXPECT_EQ(served, RunnerGreedyOnGpus(32, at, model));
}

class GpuServerFailure : public ::testing::TestWithParam<Placement> {};

TEST_P(GpuServerFailure, DeadRankFailsTheRequestAndTheRestLetGo) {
  const Placement at = GetParam();
  if (Gpus() < at.gpus_needed()) GTEST_SKIP() << "needs " << at.gpus_needed() << " GPUs";
  std::vector<int64_t> before;
  for (int g : at.gpus()) before.push_back(UsedMib(g));
  Server s({.tp = at.tp, .comm_timeout_ms = 3000, .extra_flags = at.flags()});
  ASSERT_TRUE(s.ready());
  const auto workers = s.WorkerPids();
  ASSERT_EQ(static_cast<int>(workers.size()), at.tp);
  v1::GenerateRequest req = TokensRequest(kPrompt, 4000);
  req.set_ignore_eos(true);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(workers[1], SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  Streamed out = Generate(s.api(), req);
  killer.join();
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE) << out.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_EQ(s.SignalAndWait(0), 4);  // policy exit
  EXPECT_TRUE(AllGone(workers, 5000));
  for (size_t k = 0; k < before.size(); ++k) ExpectMemoryBack(at.gpus()[k], before[k]);
}

INSTANTIATE_TEST_SUITE_P(Placements, GpuServerFailure,
                         ::testing::Values(Placement{2, false}, Placement{2, true}, Placement{4, true}),
                         [](const ::testing::TestParamInfo<Placement>& p) { return p.param.name(); });

}  // namespace
}  // namespace q38::e2e
