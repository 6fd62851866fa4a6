// The build manifest (docs/design.md §7, docs/contract.md §3.1): which source, toolchain and flags
// produced which binaries. The build writes it last (`q38-build-manifest`, run by the
// q38_build_manifest target), `complete` only when no production source changed while it ran.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace q38 {

inline constexpr char kBuildManifestFormat[] = "q38.build_manifest/1";
inline constexpr char kBuildManifestFile[] = "build_manifest.json";

// The production tree: every git-tracked file under these paths (tests, docs and scripts excluded).
inline constexpr const char* kProductionPaths[] = {"CMakeLists.txt", "common", "proto", "tokenizer",
                                                   "kernels", "worker", "server", "client",
                                                   "provenance", "deploy"};

struct SourceTree {
  std::string commit;                          // git HEAD
  std::map<std::string, std::string> files;    // path -> SHA-256 of its current contents
  std::string fingerprint;                     // SHA-256 over "path sha\n" lines, sorted by path
};

// Hashes every tracked production file of the git checkout at `root`. A tracked file missing on
// disk is FailedPrecondition naming it; a directory that is not a checkout is FailedPrecondition.
absl::StatusOr<SourceTree> FingerprintSourceTree(const std::string& root);

// The files whose hashes differ between two trees (changed, added or removed), sorted.
std::vector<std::string> ChangedFiles(const SourceTree& built, const SourceTree& now);

struct BuiltBinary {
  std::string name;    // q38-server
  std::string path;    // as built, absolute
  std::string sha256;
};

struct BuildManifest {
  std::string format = kBuildManifestFormat;
  std::string source_root;
  SourceTree source;
  std::map<std::string, std::string> toolchain;  // compiler, cuda, nccl, grpc, protobuf, arch flags...
  std::vector<BuiltBinary> binaries;
  double written_unix = 0;
  bool complete = false;
  std::string incomplete_reason;  // why complete is false
};

nlohmann::json BuildManifestJson(const BuildManifest& m);
// Strict: a missing or mistyped field is InvalidArgument naming it.
absl::StatusOr<BuildManifest> ParseBuildManifest(const std::string& text);

struct BuildManifestOptions {
  std::string source_root;
  std::string out;                      // the manifest file
  std::string started_stamp;            // touched when the build began
  std::map<std::string, std::string> toolchain;
  std::vector<std::string> binaries;    // built binary paths
};

// Writes the manifest incomplete first, then complete once the sources hashed after the binaries
// match those hashed before them and none was modified after `started_stamp`. Sources that changed
// leave it incomplete with the reason (not an error: the build itself succeeded). Errors are for
// what could not be read or written.
absl::StatusOr<BuildManifest> WriteBuildManifest(const BuildManifestOptions& options);

}  // namespace q38
