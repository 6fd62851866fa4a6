// The runtime bundle (docs/design.md §7, docs/bundle.md): the release binaries, the shared libraries
// they need that a target system may lack, the build manifest, and bundle.json listing every file
// with its SHA-256, written complete-last. Verification refuses, each with its own exit code, an
// incomplete manifest, a missing file, a changed file, an extra or replaced file, a binary outside
// the bundle, a changed source tree, and a process mapping a library that is not the bundle's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_objects.h"
#include "nlohmann/json.hpp"
#include "provenance/build_manifest.h"

namespace q38 {

inline constexpr char kBundleFormat[] = "q38.bundle/1";
inline constexpr char kBundleManifestFile[] = "bundle.json";

struct BundleFile {
  std::string path;    // relative to the bundle: bin/q38-server, lib/libglog.so.1
  std::string kind;    // binary, library
  std::string sha256;  // of the file in the bundle
  std::string built_sha256;  // binaries: the build manifest's hash (differs when stripped)
  bool stripped = false;     // binaries: debug info removed with objcopy --strip-debug
  std::string origin;        // libraries: where it was copied from
};

struct Bundle {
  std::string dir;  // absolute
  std::vector<BundleFile> files;
  std::string build_manifest_sha256;
  BuildManifest build;
  double created_unix = 0;
  bool complete = false;

  // The bundle's path of binary `name` (bin/NAME, absolute).
  std::string BinaryPath(const std::string& name) const;
  const BundleFile* Find(const std::string& relative_path) const;
};

nlohmann::json BundleJson(const Bundle& b);

struct BundleOptions {
  std::string build_dir;  // holds build_manifest.json
  std::string out;        // must not exist yet
  bool strip_debug = false;
};

// Copies the build manifest's binaries (unchanged since it was written) and the libraries `ldd`
// resolves for them, leaving out the C library's own and the GPU driver's, into `out`.
absl::StatusOr<Bundle> CreateBundle(const BundleOptions& options);

// Why a bundle (or a process started from it) is refused; the value is the exit code of
// q38-server --bundle and of q38 bundle verify.
enum class Refusal : int {
  kNone = 0,
  kIncomplete = 20,          // bundle.json or the build manifest missing, unreadable or not complete
  kMissingFile = 21,         // a listed file is gone
  kChangedFile = 22,         // a listed file's hash differs, or a binary is not the build's
  kExtraOrReplaced = 23,     // a file nobody listed, or a listed library replaced by a link
  kBinaryOutside = 24,       // a listed path, or a binary a process runs, lies outside the bundle
  kSourceChanged = 25,       // the source tree's fingerprint differs from the build's
  kForeignMappedObject = 26, // a process maps a shared object that is not the bundle's
};
std::string_view RefusalName(Refusal r);

struct Verdict {
  Refusal refusal = Refusal::kNone;
  std::string message;
  bool ok() const { return refusal == Refusal::kNone; }
  int exit_code() const { return static_cast<int>(refusal); }
};

// Checks `dir` (and, when `source_root` is not empty, that checkout's production tree) and fills
// `bundle` when it passes.
Verdict VerifyBundle(const std::string& dir, const std::string& source_root, Bundle* bundle);

// `path` (a running binary) must be the bundle's bin/NAME.
Verdict CheckBundledExecutable(const Bundle& bundle, const std::string& name, const std::string& path);

// Every shared object `who` maps must be the bundle's own file with the bundle's hash, except the
// C library's and the GPU driver's, which no bundle carries (IsSystemLibrary).
Verdict CheckMappedObjects(const Bundle& bundle, const std::string& who, const std::vector<MappedObject>& objects);

// The C library's own objects (libc, libm, ld-linux, libnss_*...) and the GPU driver's (libcuda,
// libnvidia-*): they belong to the target system and are recorded but never bundled.
bool IsSystemLibrary(const std::string& path);

}  // namespace q38
