// Ranks of one process that share a GPU, joined through host memory: each collective waits for
// the rank's stream, copies its tensor to the host, runs a host group's collective there (the
// in-process one, which sums in rank order) and copies the result back. NCCL refuses two ranks
// on one GPU; this lets the tests run the CUDA model sharded at TP2 where one GPU is all there is.
// Its copies are synchronous, so a CUDA graph cannot record them: the model runs eagerly on it.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "worker/comm/communicator.h"

namespace q38 {

// `host`: this rank's member of a host group (host F32 collectives); `stream`: the rank's
// backend stream, whose queued work produces the collectives' inputs.
std::unique_ptr<Communicator> MakeHostStagedCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream);

}  // namespace q38
