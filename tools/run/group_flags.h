// The device flags the model tools share (q38-run, q38-bench-model): --device, --gpus,
// --cpu_comm, --cpu_math, --cpu_threads and --decode_graph, read into LocalGroupOptions.
#pragma once

#include "absl/status/statusor.h"
#include "worker/model/local_group.h"

namespace q38 {

absl::StatusOr<LocalGroupOptions> LocalGroupOptionsFromFlags();

}  // namespace q38
