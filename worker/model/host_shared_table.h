// Host memory that every process of one host asking for the same `key` shares: the synthetic
// n-gram table (51 GB at full size) is made once, not once per rank. The first process to ask
// makes it in an anonymous memory file (memfd), fills it and publishes its pid and descriptor in
// /dev/shm; the others open the file through /proc/<pid>/fd and map it read-only. The memory goes
// when the last mapping does, so a crash leaks at most the few-byte notice, which the next asker
// finds stale and replaces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace q38 {

struct HostSharedTable {
  std::shared_ptr<const uint8_t> data;  // `bytes` of it; freed (unmapped) with the last copy
  bool made_here = false;               // this process filled it
};

// `fill` writes the bytes; it runs in one process only and must give the same bytes for a key
// wherever it runs. Waits up to `timeout_ms` for another process that is filling it.
absl::StatusOr<HostSharedTable> MapHostSharedTable(const std::string& key, size_t bytes,
                                                   const std::function<void(uint8_t*)>& fill, int timeout_ms = 600000);

}  // namespace q38
