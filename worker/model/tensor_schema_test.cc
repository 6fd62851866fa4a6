// The schema of the release geometry: one entry per name, the tensor count the checkpoint has,
// and shapes that the TP plan can split at TP 4.
#include "worker/model/tensor_schema.h"

#include <set>

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(TensorSchemaTest, ReleaseListsEveryTensorOnceWithSplittableShapes) {
  const ModelConfig c = ReleaseModelConfig();
  const TensorSchema schema(c, {});
  std::set<std::string> names;
  int64_t nvfp4_codes = 0;
  for (const TensorSpec& t : schema.tensors()) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(schema.Find(t.name), &t);
    ASSERT_FALSE(t.dtypes.empty()) << t.name;
    if (t.split == TpSplit::kRows) {
      EXPECT_EQ(t.shape.front() % 4, 0) << t.name;
    }
    if (t.split == TpSplit::kColumns) {
      EXPECT_EQ(t.shape.back() % 4, 0) << t.name;
    }
    if (t.draw == Draw::kNvfp4Codes) ++nvfp4_codes;
  }
  EXPECT_EQ(nvfp4_codes, int64_t{c.num_layers} * c.num_experts * 3);
  EXPECT_EQ(schema.Find("model.language_model.layers.0.mlp.experts.0.gate_proj.weight")->shape,
            (std::vector<int64_t>{c.moe_intermediate, c.hidden_size / 2}));
  EXPECT_EQ(schema.Find("lm_head.weight")->split, TpSplit::kRows);
  EXPECT_EQ(schema.Find("model.language_model.embed_tokens.weight")->split, TpSplit::kReplicated);
  EXPECT_EQ(schema.Find("no.such.tensor"), nullptr);
}

TEST(TensorSchemaTest, FusedExpertsAndBf16TableReplaceTheirNvfp4AndFp8Forms) {
  const ModelConfig c = TinyModelConfig();
  const TensorSchema schema(c, {.nvfp4_experts = false, .fp8_ple = false, .prefix = "model."});
  EXPECT_NE(schema.Find("model.layers.0.mlp.experts.gate_up_proj"), nullptr);
  EXPECT_EQ(schema.Find("model.layers.0.mlp.experts.0.gate_proj.weight"), nullptr);
  for (const TensorSpec& t : schema.tensors()) {
    EXPECT_EQ(t.name.find("weight_scale"), std::string::npos) << t.name;
    EXPECT_TRUE(t.name == "lm_head.weight" || t.name.rfind("model.", 0) == 0) << t.name;
  }
}

}  // namespace
}  // namespace q38
