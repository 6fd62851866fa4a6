// The coordinator's run directory: worker sockets, the rendezvous, the metrics TLS file. It is
// removed on every way out of the coordinator; only a coordinator killed outright leaves one, and
// the next start removes those whose owner is gone.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace q38 {

class RunDir {
 public:
  // `requested` empty: a fresh /tmp/q38-run-XXXXXX. Either way an `owner` file names this process.
  static absl::StatusOr<RunDir> Create(const std::string& requested);
  RunDir(RunDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  RunDir& operator=(RunDir&&) = delete;
  ~RunDir();

  const std::string& path() const { return path_; }

 private:
  explicit RunDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Removes the q38-run-* directories under `parent` whose owner process no longer runs (its pid is
// gone or now names another process); returns how many it removed.
int RemoveStaleRunDirs(const std::string& parent);

}  // namespace q38
