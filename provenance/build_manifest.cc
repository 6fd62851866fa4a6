#include "provenance/build_manifest.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/json_fields.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace q38 {
namespace {

using nlohmann::json;

constexpr char kWhat[] = "build manifest";

std::string TreeFingerprint(const std::map<std::string, std::string>& files) {
  std::string lines;
  for (const auto& [path, sha] : files) absl::StrAppend(&lines, path, " ", sha, "\n");
  return Sha256Hex(lines);
}

// Modification time in nanoseconds since the epoch; -1 when it cannot be read.
int64_t ModifiedNs(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
}

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

absl::Status Write(const BuildManifest& m, const std::string& path) {
  return WriteFileAtomically(path, BuildManifestJson(m).dump(2) + "\n");
}

}  // namespace

absl::StatusOr<SourceTree> FingerprintSourceTree(const std::string& root) {
  SourceTree tree;
  absl::StatusOr<std::string> head = RunCommand({"git", "-C", root, "rev-parse", "HEAD"});
  if (!head.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(root, " is not a git checkout (", head.status().message(), ")"));
  }
  tree.commit = std::string(absl::StripAsciiWhitespace(*head));
  std::vector<std::string> args = {"git", "-C", root, "ls-files", "-z", "--"};
  for (const char* p : kProductionPaths) args.push_back(p);
  ASSIGN_OR_RETURN(std::string listing, RunCommand(args));
  for (absl::string_view path : absl::StrSplit(listing, '\0', absl::SkipEmpty())) {
    const std::string full = absl::StrCat(root, "/", path);
    absl::StatusOr<std::string> sha = Sha256File(full);
    if (!sha.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("tracked file ", path, " cannot be read: ", sha.status().message()));
    }
    tree.files.emplace(std::string(path), *std::move(sha));
  }
  if (tree.files.empty()) return absl::FailedPreconditionError(absl::StrCat(root, " tracks no production files"));
  tree.fingerprint = TreeFingerprint(tree.files);
  return tree;
}

std::vector<std::string> ChangedFiles(const SourceTree& built, const SourceTree& now) {
  std::vector<std::string> changed;
  for (const auto& [path, sha] : built.files) {
    auto it = now.files.find(path);
    if (it == now.files.end() || it->second != sha) changed.push_back(path);
  }
  for (const auto& [path, sha] : now.files) {
    if (!built.files.contains(path)) changed.push_back(path);
  }
  std::sort(changed.begin(), changed.end());
  return changed;
}

json BuildManifestJson(const BuildManifest& m) {
  json binaries = json::array();
  for (const BuiltBinary& b : m.binaries) binaries.push_back({{"name", b.name}, {"path", b.path}, {"sha256", b.sha256}});
  return {{"format", m.format},
          {"source_root", m.source_root},
          {"git_commit", m.source.commit},
          {"source_fingerprint", m.source.fingerprint},
          {"sources", m.source.files},
          {"toolchain", m.toolchain},
          {"binaries", binaries},
          {"written_unix", m.written_unix},
          {"incomplete_reason", m.incomplete_reason},
          {"complete", m.complete}};
}

absl::StatusOr<BuildManifest> ParseBuildManifest(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseJsonObject(text, kWhat));
  Fields f(j, kWhat);
  BuildManifest m;
  ASSIGN_OR_RETURN(m.format, f.String("format"));
  if (m.format != kBuildManifestFormat) return f.Error("format", absl::StrCat("expected ", kBuildManifestFormat));
  ASSIGN_OR_RETURN(m.source_root, f.String("source_root"));
  ASSIGN_OR_RETURN(m.source.commit, f.String("git_commit"));
  ASSIGN_OR_RETURN(m.source.fingerprint, f.String("source_fingerprint"));
  ASSIGN_OR_RETURN(m.written_unix, f.Number("written_unix"));
  ASSIGN_OR_RETURN(m.incomplete_reason, f.String("incomplete_reason"));
  ASSIGN_OR_RETURN(m.complete, f.Bool("complete"));
  for (const char* key : {"sources", "toolchain"}) {
    ASSIGN_OR_RETURN(Fields map, f.Object(key));
    auto& out = std::string(key) == "sources" ? m.source.files : m.toolchain;
    for (const auto& [k, v] : f.At(key).items()) {
      ASSIGN_OR_RETURN(out[k], map.String(k));
    }
  }
  if (!f.Has("binaries") || !f.At("binaries").is_array()) return f.Error("binaries", "must be a list");
  for (size_t i = 0; i < f.At("binaries").size(); ++i) {
    const json& b = f.At("binaries")[i];
    if (!b.is_object()) return f.Error(absl::StrCat("binaries[", i, "]"), "must be an object");
    Fields bf(b, kWhat, absl::StrCat("binaries[", i, "]."));
    BuiltBinary bin;
    ASSIGN_OR_RETURN(bin.name, bf.String("name"));
    ASSIGN_OR_RETURN(bin.path, bf.String("path"));
    ASSIGN_OR_RETURN(bin.sha256, bf.String("sha256"));
    m.binaries.push_back(std::move(bin));
  }
  if (!m.source.files.empty() && TreeFingerprint(m.source.files) != m.source.fingerprint) {
    return f.Error("source_fingerprint", "does not match the listed sources");
  }
  return m;
}

absl::StatusOr<BuildManifest> WriteBuildManifest(const BuildManifestOptions& o) {
  BuildManifest m;
  m.source_root = o.source_root;
  m.toolchain = o.toolchain;
  m.written_unix = NowUnix();
  m.incomplete_reason = "the build manifest is being written";
  RETURN_IF_ERROR(Write(m, o.out));  // a crash from here on leaves an explicitly incomplete manifest

  absl::StatusOr<SourceTree> before = FingerprintSourceTree(o.source_root);
  if (!before.ok()) {
    m.incomplete_reason = std::string(before.status().message());
    RETURN_IF_ERROR(Write(m, o.out));
    return m;
  }
  m.source = *before;
  for (const std::string& path : o.binaries) {
    ASSIGN_OR_RETURN(std::string sha, Sha256File(path));
    m.binaries.push_back({std::filesystem::path(path).filename().string(), path, std::move(sha)});
  }
  // The binaries are from the sources hashed above only if nothing changed since the build began.
  ASSIGN_OR_RETURN(SourceTree after, FingerprintSourceTree(o.source_root));
  const int64_t started = o.started_stamp.empty() ? -1 : ModifiedNs(o.started_stamp);
  std::vector<std::string> changed = ChangedFiles(*before, after);
  for (const auto& [path, sha] : after.files) {
    if (started >= 0 && ModifiedNs(absl::StrCat(o.source_root, "/", path)) > started) changed.push_back(path);
  }
  if (!o.started_stamp.empty() && started < 0) {
    m.incomplete_reason = absl::StrCat("the build-start stamp ", o.started_stamp, " is missing");
  } else if (!changed.empty()) {
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    m.incomplete_reason = absl::StrCat("production sources changed during the build: ", absl::StrJoin(changed, ", "));
  } else {
    m.incomplete_reason.clear();
    m.complete = true;
  }
  m.written_unix = NowUnix();
  RETURN_IF_ERROR(Write(m, o.out));
  return m;
}

}  // namespace q38
