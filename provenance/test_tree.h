// Test helpers for provenance/: a throwaway git checkout with a production tree, and a build manifest
// of real ELF binaries (copies of the test binary, which links shared libraries a bundle carries).
#pragma once

#include <string>

#include "provenance/build_manifest.h"

namespace q38::testing {

// A fresh directory under the test's temp dir.
std::string FreshDir(const std::string& name);

// A git checkout at `dir` with a.cc under common and b.cc under server (tracked production sources)
// and c.md under docs (not production).
void MakeCheckout(const std::string& dir);
void WriteText(const std::string& path, const std::string& text);

// A build directory holding copies of this test binary as q38-server and q38-worker and a complete
// build manifest of them over the checkout `source`.
std::string MakeBuild(const std::string& dir, const std::string& source);

}  // namespace q38::testing
