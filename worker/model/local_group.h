// A tensor-parallel group inside one process: one thread per rank, each with its own CPU backend
// and weight shard, joined by in-process collectives. The model runner, the benchmark and the
// tests use it; servers run one rank per process instead.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "worker/model/qwen4_exp.h"

namespace q38 {

// Loads rank r's shard and calls fn(model) on every rank concurrently; returns the first error.
absl::Status RunLocalGroup(const ModelConfig& config, const TensorStore& store, int tp,
                           const std::function<absl::Status(Model&)>& fn);

}  // namespace q38
