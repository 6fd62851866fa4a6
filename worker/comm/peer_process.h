// Whether a peer rank's process still runs: the collectives of one host that wait on a peer in
// shared memory (shm.cc) or in its GPU buffer (cuda_group.cc) ask this instead of waiting forever.
#pragma once

#include <cstdint>

namespace q38 {

// A process that exited, or one that exited and is not yet reaped.
bool ProcessGone(int32_t pid);

}  // namespace q38
