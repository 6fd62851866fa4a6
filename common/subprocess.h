// Runs a helper program (git, ldd, objcopy) and captures what it prints: the build manifest and
// the bundle ask the tools that know, rather than re-implementing them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace q38 {

// Runs argv[0] (looked up on PATH) with `argv`, in `cwd` when not empty, and returns its stdout.
// Its stderr goes to this process's stderr. A non-zero exit is FailedPrecondition naming the
// command and the code; a program that cannot be started is NotFound.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv, const std::string& cwd = "");

}  // namespace q38
