#include "common/config.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace q38 {
namespace {

using nlohmann::json;

json ReleaseJson() { return json::parse(ModelConfigJson(ReleaseModelConfig())); }

absl::Status ParseWith(const std::function<void(json&)>& edit) {
  json j = ReleaseJson();
  edit(j);
  return ParseModelConfig(j.dump()).status();
}

TEST(Config, ReleaseGeometryRoundTrips) {
  auto c = ParseModelConfig(ModelConfigJson(ReleaseModelConfig()));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_layers, 48);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->gdn_conv_channels(), 10240);
  EXPECT_EQ(c->hc_width(), 10240);
  EXPECT_EQ(c->ple_heads(), 16);
  EXPECT_EQ(c->ple_row_width(), 160);
  ASSERT_EQ(c->ple_layers.size(), 1u);
  EXPECT_EQ(c->ple_layers[0], 1);  // config.json says 2, 1-based
  int attention = 0;
  for (int i = 0; i < c->num_layers; ++i) attention += c->is_attention(i);
  EXPECT_EQ(attention, 12);
  EXPECT_TRUE(c->is_attention(3));
  EXPECT_FALSE(c->is_attention(1));
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{248044});
  EXPECT_EQ(c->seed, 1234u);
}

TEST(Config, TinyGeometryIsValid) {
  auto c = ParseModelConfig(ModelConfigJson(TinyModelConfig()));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->indexer_budget, 16);
}

TEST(Config, AcceptsEveryAttentionLabel) {
  for (const char* label : {"full_attention", "qwen_sparse_attention", "hybrid_indexed"}) {
    EXPECT_TRUE(ParseWith([&](json& j) { j["text_config"]["layer_types"][3] = label; }).ok()) << label;
  }
}

TEST(Config, FailsClosedNamingTheField) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model_type"] = "qwen3_next"; }, "model_type"},
      {[](json& j) { j.erase("text_config"); }, "text_config"},
      {[](json& j) { j["text_config"]["layer_types"][5] = "mamba"; }, "text_config.layer_types[5]: unknown layer type \"mamba\""},
      {[](json& j) { j["text_config"]["layer_types"].erase(0); }, "text_config.layer_types: has 47 entries for 48 layers"},
      {[](json& j) { j["text_config"].erase("indexer_budget"); }, "text_config.indexer_budget: missing"},
      {[](json& j) { j["text_config"]["indexer_head_dim"] = "128"; }, "text_config.indexer_head_dim: must be an integer"},
      {[](json& j) { j["text_config"]["indexer_kv_heads"] = 2; }, "text_config.indexer_kv_heads"},
      {[](json& j) { j["text_config"]["heads_per_ngram"] = 7; }, "text_config.ple_embed_dim"},
      {[](json& j) { j["text_config"].erase("eos_token_id"); }, "text_config.eos_token_id: missing"},
      {[](json& j) { j["text_config"]["eos_token_id"] = 300000; }, "text_config.eos_token_id: outside"},
      {[](json& j) { j["text_config"]["hidden_size"] = -1; }, "text_config.hidden_size: must be positive"},
      {[](json& j) { j["text_config"]["norm_topk_prob"] = false; }, "text_config.norm_topk_prob"},
      {[](json& j) { j["text_config"]["ple_layer_ids"] = {4}; }, "text_config.ple_layer_ids: the PLE layer must be"},
      {[](json& j) { j["text_config"]["ple_layer_ids"] = {0}; }, "text_config.ple_layer_ids: entries are 1-based"},
      {[](json& j) { j["text_config"]["rope_parameters"]["rope_type"] = "yarn"; }, "text_config.rope_parameters.rope_type"},
      {[](json& j) { j["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.3; }, "partial_rotary_factor"},
      {[](json& j) { j["text_config"]["num_key_value_heads"] = 5; }, "text_config.num_key_value_heads"},
      {[](json& j) { j["text_config"]["moe_intermediate_size"] = 100; }, "text_config.moe_intermediate_size"},
      {[](json& j) { j["text_config"]["mamba_ssm_dtype"] = "bfloat16"; }, "text_config.mamba_ssm_dtype"},
  };
  for (const Case& c : cases) {
    absl::Status s = ParseWith(c.edit);
    EXPECT_FALSE(s.ok()) << c.expected;
    EXPECT_NE(s.message().find(c.expected), std::string_view::npos) << s.message();
  }
}

TEST(Config, RejectsMalformedJson) {
  EXPECT_FALSE(ParseModelConfig("{\"model_type\": ").ok());
  EXPECT_FALSE(ParseModelConfig("[]").ok());
  EXPECT_FALSE(ParseModelConfig("").ok());
}

TEST(Config, EosMayBeAList) {
  auto c = ParseModelConfig([] {
    json j = ReleaseJson();
    j["text_config"]["eos_token_id"] = {248044, 248046};
    return j.dump();
  }());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ple_eos(), 248044);  // the reference resets n-grams on the first entry
}

TEST(GenerationConfig, ParsesAndValidates) {
  auto g = ParseGenerationConfig(R"({"eos_token_id":[248046,248044],"temperature":1.0,"top_p":0.95,"top_k":20,"do_sample":true})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{248046, 248044}));
  EXPECT_EQ(g->top_k, 20);
  EXPECT_FALSE(ParseGenerationConfig(R"({"eos_token_id":1,"top_p":1.5})").ok());
  EXPECT_FALSE(ParseGenerationConfig(R"({"top_p":0.5})").ok());
}

}  // namespace
}  // namespace q38
