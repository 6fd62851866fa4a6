#include "server/contract.h"

#include <functional>

#include <gtest/gtest.h>

#include "common/config.h"
#include "nlohmann/json.hpp"

namespace q38 {
namespace {

std::string ContractText(const std::string& name) { return *ReadFile(std::string(Q38_CONTRACTS_DIR) + "/" + name + ".json"); }

// A manifest that conforms to the tiny-cpu contract (CPU workers in the fast path).
v1::Manifest TinyCpuManifest() {
  v1::Manifest m;
  m.set_tp(4);
  for (int r = 0; r < 4; ++r) {
    v1::WorkerManifest* w = m.add_workers();
    w->set_rank(r);
    w->mutable_model()->set_model_type("qwen4_exp");
    w->mutable_model()->set_experts("nvfp4");
    w->mutable_model()->set_synthetic(true);
    w->mutable_device()->set_kind("cpu");
    w->mutable_dtypes()->set_activation("F32");
    w->mutable_dtypes()->set_kv_cache("F32");
    w->mutable_dtypes()->set_gdn_state("F32");
    w->mutable_dtypes()->set_conv_state("F32");
    w->set_graph_mode("none");
    w->set_max_context(1024);
    w->set_prefill_chunk(8192);
    w->set_max_num_seqs(1);
    w->add_routes("cpu_fast");
  }
  return m;
}

TEST(Contract, CheckedInContractsParse) {
  absl::StatusOr<Contract> seed = ParseContract(ContractText("seed"));
  ASSERT_TRUE(seed.ok()) << seed.status();
  EXPECT_EQ(seed->tp, 4);
  EXPECT_EQ(seed->device, "cuda");
  EXPECT_EQ(seed->experts, "nvfp4");
  EXPECT_EQ(seed->activation, "F16");
  EXPECT_EQ(seed->kv_cache, "F16");
  EXPECT_EQ(seed->gdn_state, "F32");
  EXPECT_EQ(seed->conv_state, "F16");
  EXPECT_EQ(seed->graph_mode, "FULL_AND_PIECEWISE");
  EXPECT_EQ(seed->max_context, 262144);
  EXPECT_EQ(seed->prefill_chunk, 8192);
  EXPECT_EQ(seed->max_num_seqs, 1);
  EXPECT_FALSE(seed->mtp);
  EXPECT_FALSE(seed->prefix_cache);
  EXPECT_TRUE(seed->approximate_routes.empty());
  EXPECT_EQ(seed->benchmark.prompt_lengths, std::vector<int64_t>{8192});
  EXPECT_EQ(seed->benchmark.max_tokens, 513);
  EXPECT_TRUE(seed->benchmark.long_context);
  EXPECT_EQ(seed->benchmark.health_checks, (std::vector<std::string>{"arithmetic", "record_copy"}));
  absl::StatusOr<Contract> tiny = ParseContract(ContractText("tiny-cpu"));
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->benchmark.max_tokens, 513);
  EXPECT_EQ(tiny->sha256.size(), 64u);
  EXPECT_TRUE(ContractDifferences(*tiny, TinyCpuManifest()).empty());
  absl::StatusOr<Contract> small_cuda = ParseContract(ContractText("small-cuda"));
  ASSERT_TRUE(small_cuda.ok()) << small_cuda.status();
  EXPECT_EQ(small_cuda->device, "cuda");
  EXPECT_EQ(small_cuda->graph_mode, "FULL_DECODE_ONLY");
  EXPECT_EQ(small_cuda->benchmark.health_checks, (std::vector<std::string>{"arithmetic", "record_copy"}));
}

TEST(Contract, ParseNamesTheBadField) {
  nlohmann::json j = nlohmann::json::parse(ContractText("tiny-cpu"));
  auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = j;
    edit(c);
    return std::string(ParseContract(c.dump()).status().message());
  };
  EXPECT_EQ(error([](auto& c) { c["colour"] = 1; }), "contract: colour: unknown field");
  EXPECT_EQ(error([](auto& c) { c.erase("tp"); }), "contract: tp: missing");
  EXPECT_EQ(error([](auto& c) { c["dtypes"]["kv_cache"] = 16; }), "contract: dtypes.kv_cache: must be a string");
  EXPECT_EQ(error([](auto& c) { c["benchmark"]["repeats"] = 1; }), "contract: benchmark.repeats: must be at least 2");
  EXPECT_EQ(error([](auto& c) { c["benchmark"]["health_checks"] = {"vibes"}; }), "contract: benchmark.health_checks: unknown check \"vibes\"");
  EXPECT_EQ(error([](auto& c) { c["benchmark"]["prompt_lengths"] = {600}; }),
            "contract: benchmark.prompt_lengths: 600 + 513 tokens exceed max_context 1024");
  EXPECT_EQ(ParseContract("{").status().message(), "contract: not valid JSON");
}

TEST(Contract, NamesEveryDifferingField) {
  const Contract seed = *ParseContract(ContractText("seed"));
  v1::Manifest m = TinyCpuManifest();
  m.mutable_workers()->RemoveLast();
  m.set_tp(3);
  m.mutable_workers(1)->add_approximate_routes("lm_head_top1");
  m.mutable_workers(2)->set_mtp(true);
  const std::vector<std::string> d = ContractDifferences(seed, m);
  auto has = [&](const std::string& s) { return std::find(d.begin(), d.end(), s) != d.end(); };
  EXPECT_TRUE(has("tp: contract 4, the server has 3")) << ::testing::PrintToString(d);
  EXPECT_TRUE(has("workers: contract ranks 0..3, manifest has ranks [0, 1, 2]"));
  EXPECT_TRUE(has("workers[rank=0].model.synthetic: contract false, rank 0 has true"));
  EXPECT_TRUE(has("workers[rank=0].device.kind: contract cuda, rank 0 has cpu"));
  EXPECT_TRUE(has("workers[rank=0].dtypes.activation: contract F16, rank 0 has F32"));
  EXPECT_TRUE(has("workers[rank=0].dtypes.kv_cache: contract F16, rank 0 has F32"));
  EXPECT_FALSE(has("workers[rank=0].dtypes.gdn_state: contract F32, rank 0 has F32"));
  EXPECT_TRUE(has("workers[rank=0].dtypes.conv_state: contract F16, rank 0 has F32"));
  EXPECT_TRUE(has("workers[rank=2].graph_mode: contract FULL_AND_PIECEWISE, rank 2 has none"));
  EXPECT_TRUE(has("workers[rank=1].max_context: contract 262144, rank 1 has 1024"));
  EXPECT_TRUE(has("workers[rank=1].approximate_routes: contract [], rank 1 has [lm_head_top1]"));
  EXPECT_TRUE(has("workers[rank=2].mtp: contract false, rank 2 has true"));
  // 1 + 1 + 3 ranks x (synthetic, kind, activation, kv, conv, graph, context) + the route and the MTP flag.
  EXPECT_EQ(d.size(), 2u + 3 * 7 + 2);
  absl::Status s = CheckContract(seed, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("the workers deviate from contract seed-qwen38-nvfp4-tp4 in 25 fields: tp: contract 4"), std::string::npos) << s;
}

TEST(Contract, RoutesAreExactWhenTheContractNamesThem) {
  const Contract tiny = *ParseContract(ContractText("tiny-cpu"));
  v1::Manifest m = TinyCpuManifest();
  m.mutable_workers(3)->add_routes("cuda_w4a16");
  EXPECT_EQ(ContractDifferences(tiny, m),
            std::vector<std::string>{"workers[rank=3].routes: contract [cpu_fast], rank 3 has [cpu_fast, cuda_w4a16]"});
}

}  // namespace
}  // namespace q38
