// The shared objects a process has mapped, read from /proc/self/maps, each with its SHA-256: the
// proof of which libraries a worker (or the coordinator) actually runs, rather than which ones it
// was meant to load (docs/design.md §7).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace q38 {

struct MappedObject {
  std::string path;    // as the kernel names it: symlinks resolved
  std::string sha256;  // of the file's current contents
  bool operator==(const MappedObject&) const = default;
};

// Every distinct ELF file mapped by `maps_path` (a /proc/PID/maps text) other than the process's
// own executable `exe`, sorted by path. Deleted files and non-ELF mappings (checkpoints, sockets)
// are skipped.
absl::StatusOr<std::vector<MappedObject>> MappedSharedObjects(const std::string& maps_path = "/proc/self/maps",
                                                              const std::string& exe = "/proc/self/exe");

}  // namespace q38
