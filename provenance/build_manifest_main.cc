// q38-build-manifest: run by the build (target q38_build_manifest) once every release binary is
// linked; writes build_manifest.json (provenance/build_manifest.h). Exit 0 also when the manifest is
// left incomplete (the reason is printed): the build itself succeeded, the bundle will refuse it.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/config.h"
#include "common/json_fields.h"
#include "provenance/build_manifest.h"

ABSL_FLAG(std::string, source_root, "", "the git checkout that was built");
ABSL_FLAG(std::string, out, "", "the manifest file to write");
ABSL_FLAG(std::string, started_stamp, "", "a file touched when the build began");
ABSL_FLAG(std::string, toolchain_file, "", "JSON object of toolchain facts (written by CMake)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("q38-build-manifest --source_root DIR --out FILE [--started_stamp F] [--toolchain_file F] BINARY...");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  q38::BuildManifestOptions o;
  o.source_root = absl::GetFlag(FLAGS_source_root);
  o.out = absl::GetFlag(FLAGS_out);
  o.started_stamp = absl::GetFlag(FLAGS_started_stamp);
  o.binaries.assign(positional.begin() + 1, positional.end());
  if (o.source_root.empty() || o.out.empty() || o.binaries.empty()) {
    std::cerr << "q38-build-manifest: --source_root, --out and at least one binary are required\n";
    return 64;
  }
  if (const std::string file = absl::GetFlag(FLAGS_toolchain_file); !file.empty()) {
    absl::StatusOr<std::string> text = q38::ReadFile(file);
    absl::StatusOr<nlohmann::json> j = text.ok() ? q38::ParseJsonObject(*text, file) : text.status();
    if (!j.ok()) {
      std::cerr << "q38-build-manifest: " << j.status().message() << "\n";
      return 1;
    }
    for (const auto& [k, v] : j->items()) o.toolchain[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  absl::StatusOr<q38::BuildManifest> m = q38::WriteBuildManifest(o);
  if (!m.ok()) {
    std::cerr << "q38-build-manifest: " << m.status().message() << "\n";
    return 1;
  }
  if (!m->complete) std::cerr << "q38-build-manifest: warning: " << o.out << " is incomplete: " << m->incomplete_reason << "\n";
  return 0;
}
