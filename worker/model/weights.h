// The weights of qwen4_exp as one rank of a tensor-parallel group holds them: every tensor of the
// schema (tensor_schema.h) read from a checkpoint (checkpoint_source.h) or drawn (synthetic_source.h),
// sliced for the rank by the TP plan (docs/model.md §13) and stacked as the forward pass reads them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "kernels/backend.h"
#include "kernels/ple/ple.h"
#include "kernels/ple/ple_hash.h"
#include "worker/checkpoint/tensor_store.h"

namespace q38 {

struct ShardSpec {
  int rank = 0;
  int world = 1;
};

struct HcWeights {
  Buffer norm;         // [S·H], zero-centred
  Buffer down_inject;  // [R + S, S·H]; the final mixer has no inject rows: [R, S·H]
  Buffer up;           // [S·H, R]
};

// Projections of one input stacked row-wise, so that a one-token step reads them all in one
// GEMV (Model::Project): part i is the `rows[i]` rows after the parts before it.
struct StackedProjection {
  Buffer weight;  // [Σ rows, K]
  std::vector<int64_t> rows;
};

struct GdnWeights {
  // qkv [2·Hk·dk + Hv·dv], z [Hv·dv], b [Hv], a [Hv]: rows of this rank's heads, from [H]
  StackedProjection in;
  Buffer conv;          // [channels, K]
  Buffer a_log, dt_bias;
  Buffer norm;          // [dv]
  Buffer out;           // [H, Hv·dv] (this rank's columns)
  int64_t key_heads = 0;  // on this rank
};

struct AttentionWeights {
  // q, gate [Hq·dh] each (this rank's heads), k, v [Hkv·dh] (this rank's KV heads), and the
  // replicated indexer's index_q [Hi·di] and index_k [di], from [H]
  StackedProjection in;
  Buffer o;              // [H, Hq·dh]
  Buffer q_norm, k_norm;  // [dh]
  Buffer index_q_norm, index_k_norm;  // [di]
  int64_t q_heads = 0, kv_heads = 0;
};

struct MoeWeights {
  // router [E], the shared expert's gate and up [2·Is] (gate rows, then up rows; this rank's
  // slice of each), its sigmoid gate [1], from [H]
  StackedProjection in;
  Buffer shared_down;     // [H, Is]
  ExpertWeights experts;
};

struct PleWeights {
  Buffer key, value;                          // [S·H, D], [H, D]
  Buffer norm_key, norm_query, norm_conv;     // [S·H]
  Buffer conv;                                // [S·H, K]
  PleTable table;
  PleHash hash;
};

struct LayerWeights {
  LayerType type;
  HcWeights attn_hc, mlp_hc;
  GdnWeights gdn;
  AttentionWeights attn;
  MoeWeights moe;
  std::optional<PleWeights> ple;
};

struct ModelWeights {
  Buffer embed;    // [V, H]
  Buffer lm_head;  // [V / world, H]: this rank's vocabulary slice
  int64_t vocab_begin = 0;
  HcWeights mixer;
  std::vector<LayerWeights> layers;
  bool experts_nvfp4 = true;
  // Backbone values a narrower backend format could not hold (BF16 → FP16), for the manifest.
  int64_t overflow_count = 0;
};

// Loads and slices every tensor. Fails with a message naming the tensor on a missing or
// unexpected tensor, a wrong shape or dtype, a shard count the geometry cannot split, or PLE
// hash buffers that differ from the constants the config derives.
// `progress(layers_done, layers_total)` is called after each layer, for startup reporting.
absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& config, const TensorStore& store,
                                         Backend& backend, const ShardSpec& shard,
                                         const std::function<void(int, int)>& progress = nullptr);

// Weights of the same shapes drawn on the backend from `seed` instead of read
// (synthetic_source.h).
absl::StatusOr<ModelWeights> SyntheticWeights(const ModelConfig& config, Backend& backend, const ShardSpec& shard,
                                              uint64_t seed, const std::function<void(int, int)>& progress = nullptr);

}  // namespace q38
