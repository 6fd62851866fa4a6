#include "provenance/bundle.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/json_fields.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace q38 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kWhat[] = "bundle.json";

Verdict Refuse(Refusal r, std::string message) { return {r, std::move(message)}; }

absl::Status WriteBundleJson(const Bundle& b) {
  return WriteFileAtomically((fs::path(b.dir) / kBundleManifestFile).string(), BundleJson(b).dump(2) + "\n");
}

// `ldd` of one binary: soname -> resolved path, for every library it loads.
absl::StatusOr<std::map<std::string, std::string>> Libraries(const std::string& binary) {
  ASSIGN_OR_RETURN(std::string text, RunCommand({"ldd", binary}));
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    // "\tlibglog.so.1 => /lib/x86_64-linux-gnu/libglog.so.1 (0x...)"; the loader and the vdso have no "=>".
    std::vector<absl::string_view> parts = absl::StrSplit(absl::StripAsciiWhitespace(line), absl::MaxSplits(" => ", 1));
    if (parts.size() != 2) continue;
    const std::string name(parts[0]);
    absl::string_view target = parts[1];
    if (absl::StartsWith(target, "not found")) {
      return absl::FailedPreconditionError(absl::StrCat(binary, " needs ", name, ", which is not installed"));
    }
    out[name] = std::string(target.substr(0, target.find(" (")));
  }
  return out;
}

absl::StatusOr<BundleFile> ParseFile(const json& j, size_t i) {
  const std::string at = absl::StrCat("files[", i, "]");
  if (!j.is_object()) return FieldError(kWhat, at, "must be an object");
  Fields f(j, kWhat, at + ".");
  BundleFile file;
  ASSIGN_OR_RETURN(file.path, f.String("path"));
  ASSIGN_OR_RETURN(file.kind, f.String("kind"));
  ASSIGN_OR_RETURN(file.sha256, f.String("sha256"));
  if (file.kind == "binary") {
    ASSIGN_OR_RETURN(file.built_sha256, f.String("built_sha256"));
    ASSIGN_OR_RETURN(file.stripped, f.Bool("stripped"));
  } else if (file.kind == "library") {
    ASSIGN_OR_RETURN(file.origin, f.String("origin"));
  } else {
    return f.Error("kind", "must be binary or library");
  }
  return file;
}

absl::StatusOr<Bundle> ParseBundle(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseJsonObject(text, kWhat));
  Fields f(j, kWhat);
  ASSIGN_OR_RETURN(std::string format, f.String("format"));
  if (format != kBundleFormat) return f.Error("format", absl::StrCat("expected ", kBundleFormat));
  Bundle b;
  ASSIGN_OR_RETURN(b.created_unix, f.Number("created_unix"));
  ASSIGN_OR_RETURN(b.build_manifest_sha256, f.String("build_manifest_sha256"));
  ASSIGN_OR_RETURN(b.complete, f.Bool("complete"));
  if (!f.Has("files") || !f.At("files").is_array()) return f.Error("files", "must be a list");
  for (size_t i = 0; i < f.At("files").size(); ++i) {
    ASSIGN_OR_RETURN(BundleFile file, ParseFile(f.At("files")[i], i));
    b.files.push_back(std::move(file));
  }
  return b;
}

// `relative` names a place inside `dir`: not absolute, no "..", and no link leading out.
bool Inside(const fs::path& dir, const std::string& relative) {
  const fs::path p(relative);
  if (p.empty() || p.is_absolute()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(dir / p, ec);
  if (ec) return false;
  const std::string root = dir.string() + "/";
  return resolved.string().starts_with(root);
}

Verdict CheckFiles(const Bundle& b) {
  const fs::path dir(b.dir);
  std::error_code ec;
  for (const BundleFile& f : b.files) {
    // A library is the bundle's own copy; a link in its place is a replacement wherever it points.
    if (f.kind == "library" && fs::is_symlink(dir / f.path, ec)) {
      return Refuse(Refusal::kExtraOrReplaced, absl::StrCat("library ", f.path, " was replaced by a link to ", fs::read_symlink(dir / f.path, ec).string()));
    }
    if (!Inside(dir, f.path)) return Refuse(Refusal::kBinaryOutside, absl::StrCat(f.path, " lies outside the bundle ", b.dir));
  }
  for (const BundleFile& f : b.files) {
    const fs::path p = dir / f.path;
    if (!fs::exists(p, ec)) return Refuse(Refusal::kMissingFile, absl::StrCat(f.path, " is missing"));
    absl::StatusOr<std::string> sha = Sha256File(p.string());
    if (!sha.ok()) return Refuse(Refusal::kMissingFile, std::string(sha.status().message()));
    if (*sha != f.sha256) return Refuse(Refusal::kChangedFile, absl::StrCat(f.path, " changed: SHA-256 ", *sha, ", bundled ", f.sha256));
  }
  for (const BundleFile& f : b.files) {
    if (f.kind != "binary") continue;
    const std::string name = fs::path(f.path).filename().string();
    auto built = std::find_if(b.build.binaries.begin(), b.build.binaries.end(), [&](const BuiltBinary& x) { return x.name == name; });
    if (built == b.build.binaries.end() || built->sha256 != f.built_sha256 || (!f.stripped && f.sha256 != f.built_sha256)) {
      return Refuse(Refusal::kChangedFile, absl::StrCat(f.path, " is not the binary the build manifest records"));
    }
  }
  return {};
}

Verdict CheckNothingExtra(const Bundle& b) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(b.dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory() && !it->is_symlink()) continue;
    const std::string rel = fs::relative(it->path(), b.dir).string();
    if (rel == kBundleManifestFile || rel == kBuildManifestFile || b.Find(rel) != nullptr) continue;
    return Refuse(Refusal::kExtraOrReplaced, absl::StrCat(rel, " is in the bundle but not in its manifest"));
  }
  if (ec) return Refuse(Refusal::kMissingFile, absl::StrCat("cannot list ", b.dir, ": ", ec.message()));
  return {};
}

}  // namespace

std::string Bundle::BinaryPath(const std::string& name) const { return (fs::path(dir) / "bin" / name).string(); }

const BundleFile* Bundle::Find(const std::string& relative_path) const {
  for (const BundleFile& f : files) {
    if (f.path == relative_path) return &f;
  }
  return nullptr;
}

json BundleJson(const Bundle& b) {
  json files = json::array();
  for (const BundleFile& f : b.files) {
    json e = {{"path", f.path}, {"kind", f.kind}, {"sha256", f.sha256}};
    if (f.kind == "binary") {
      e["built_sha256"] = f.built_sha256;
      e["stripped"] = f.stripped;
    } else {
      e["origin"] = f.origin;
    }
    files.push_back(std::move(e));
  }
  return {{"format", kBundleFormat},
          {"created_unix", b.created_unix},
          {"build_manifest_sha256", b.build_manifest_sha256},
          {"git_commit", b.build.source.commit},
          {"source_fingerprint", b.build.source.fingerprint},
          {"files", files},
          {"complete", b.complete}};
}

std::string_view RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kNone: return "ok";
    case Refusal::kIncomplete: return "incomplete manifest";
    case Refusal::kMissingFile: return "missing file";
    case Refusal::kChangedFile: return "changed file";
    case Refusal::kExtraOrReplaced: return "extra or replaced file";
    case Refusal::kBinaryOutside: return "binary outside the bundle";
    case Refusal::kSourceChanged: return "source tree changed";
    case Refusal::kForeignMappedObject: return "shared object not from the bundle";
  }
  return "unknown";
}

bool IsSystemLibrary(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  if (absl::StrContains(path, "/gconv/")) return true;  // the C library's charset modules
  for (const char* prefix : {"libc.so", "libm.so", "libmvec.so", "libpthread.so", "libdl.so", "librt.so",
                             "ld-linux", "libnss_", "libresolv.so", "libanl.so", "libutil.so",
                             "libBrokenLocale.so", "libthread_db.so", "libcuda.so", "libnvidia-"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

absl::StatusOr<Bundle> CreateBundle(const BundleOptions& o) {
  const std::string manifest_path = (fs::path(o.build_dir) / kBuildManifestFile).string();
  ASSIGN_OR_RETURN(std::string manifest_text, ReadFile(manifest_path));
  ASSIGN_OR_RETURN(BuildManifest build, ParseBuildManifest(manifest_text));
  if (!build.complete) {
    return absl::FailedPreconditionError(absl::StrCat(manifest_path, " is incomplete: ", build.incomplete_reason));
  }
  for (const BuiltBinary& bin : build.binaries) {
    ASSIGN_OR_RETURN(std::string sha, Sha256File(bin.path));
    if (sha != bin.sha256) {
      return absl::FailedPreconditionError(absl::StrCat(bin.path, " changed after the build manifest was written; rebuild"));
    }
  }
  std::error_code ec;
  if (fs::exists(o.out, ec)) return absl::AlreadyExistsError(absl::StrCat(o.out, " exists; a bundle goes into a new directory"));
  fs::create_directories(fs::path(o.out) / "bin", ec);
  fs::create_directories(fs::path(o.out) / "lib", ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", o.out, ": ", ec.message()));

  Bundle b;
  b.dir = fs::canonical(o.out).string();
  b.build = build;
  b.build_manifest_sha256 = Sha256Hex(manifest_text);
  b.created_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  RETURN_IF_ERROR(WriteBundleJson(b));  // incomplete until the last write
  RETURN_IF_ERROR(WriteFileAtomically((fs::path(b.dir) / kBuildManifestFile).string(), manifest_text));

  std::map<std::string, std::string> libraries;  // soname -> origin
  for (const BuiltBinary& bin : build.binaries) {
    const std::string dest = b.BinaryPath(bin.name);
    if (o.strip_debug) {
      RETURN_IF_ERROR(RunCommand({"objcopy", "--strip-debug", bin.path, dest}).status());
    } else if (!fs::copy_file(bin.path, dest, ec)) {
      return absl::PermissionDeniedError(absl::StrCat("cannot copy ", bin.path, ": ", ec.message()));
    }
    ASSIGN_OR_RETURN(std::string sha, Sha256File(dest));
    b.files.push_back({absl::StrCat("bin/", bin.name), "binary", std::move(sha), bin.sha256, o.strip_debug, ""});
    ASSIGN_OR_RETURN(auto libs, Libraries(bin.path));
    for (const auto& [name, origin] : libs) {
      if (IsSystemLibrary(origin)) continue;
      auto [it, inserted] = libraries.emplace(name, origin);
      if (!inserted && fs::canonical(it->second, ec) != fs::canonical(origin, ec)) {
        return absl::FailedPreconditionError(absl::StrCat(name, " resolves to both ", it->second, " and ", origin));
      }
    }
  }
  for (const auto& [name, origin] : libraries) {
    const fs::path dest = fs::path(b.dir) / "lib" / name;
    if (!fs::copy_file(origin, dest, ec)) {  // follows the soname link: a regular file in the bundle
      return absl::PermissionDeniedError(absl::StrCat("cannot copy ", origin, ": ", ec.message()));
    }
    ASSIGN_OR_RETURN(std::string sha, Sha256File(dest.string()));
    b.files.push_back({absl::StrCat("lib/", name), "library", std::move(sha), "", false, origin});
  }
  b.complete = true;
  RETURN_IF_ERROR(WriteBundleJson(b));
  return b;
}

Verdict VerifyBundle(const std::string& dir, const std::string& source_root, Bundle* out) {
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) return Refuse(Refusal::kIncomplete, absl::StrCat("no bundle at ", dir));
  absl::StatusOr<std::string> text = ReadFile((root / kBundleManifestFile).string());
  if (!text.ok()) return Refuse(Refusal::kIncomplete, absl::StrCat("no ", kBundleManifestFile, " in ", dir));
  absl::StatusOr<Bundle> parsed = ParseBundle(*text);
  if (!parsed.ok()) return Refuse(Refusal::kIncomplete, std::string(parsed.status().message()));
  Bundle b = *std::move(parsed);
  b.dir = root.string();
  if (!b.complete) return Refuse(Refusal::kIncomplete, absl::StrCat(kBundleManifestFile, " is not complete"));

  absl::StatusOr<std::string> build_text = ReadFile((root / kBuildManifestFile).string());
  if (!build_text.ok()) return Refuse(Refusal::kMissingFile, absl::StrCat(kBuildManifestFile, " is missing"));
  if (Sha256Hex(*build_text) != b.build_manifest_sha256) {
    return Refuse(Refusal::kChangedFile, absl::StrCat(kBuildManifestFile, " changed since the bundle was made"));
  }
  absl::StatusOr<BuildManifest> build = ParseBuildManifest(*build_text);
  if (!build.ok()) return Refuse(Refusal::kIncomplete, std::string(build.status().message()));
  if (!build->complete) return Refuse(Refusal::kIncomplete, absl::StrCat("the build manifest is incomplete: ", build->incomplete_reason));
  b.build = *std::move(build);

  if (Verdict v = CheckFiles(b); !v.ok()) return v;
  if (Verdict v = CheckNothingExtra(b); !v.ok()) return v;
  if (!source_root.empty()) {
    absl::StatusOr<SourceTree> now = FingerprintSourceTree(source_root);
    if (!now.ok()) return Refuse(Refusal::kSourceChanged, std::string(now.status().message()));
    if (now->fingerprint != b.build.source.fingerprint) {
      std::vector<std::string> changed = ChangedFiles(b.build.source, *now);
      const size_t shown = std::min<size_t>(changed.size(), 5);
      return Refuse(Refusal::kSourceChanged,
                    absl::StrCat("the production tree at ", source_root, " changed since the build (",
                                 changed.size(), " files: ", absl::StrJoin(changed.begin(), changed.begin() + shown, ", "),
                                 changed.size() > shown ? ", ..." : "", ")"));
    }
  }
  *out = std::move(b);
  return {};
}

Verdict CheckBundledExecutable(const Bundle& b, const std::string& name, const std::string& path) {
  std::error_code ec1, ec2;
  const fs::path running = fs::canonical(path, ec1), bundled = fs::canonical(b.BinaryPath(name), ec2);
  if (ec1 || ec2 || running != bundled) {
    return Refuse(Refusal::kBinaryOutside, absl::StrCat(name, " runs from ", path, ", not from the bundle's ", b.BinaryPath(name)));
  }
  return {};
}

Verdict CheckMappedObjects(const Bundle& b, const std::string& who, const std::vector<MappedObject>& objects) {
  for (const MappedObject& o : objects) {
    if (IsSystemLibrary(o.path)) continue;
    std::error_code ec;
    const fs::path mapped = fs::weakly_canonical(o.path, ec);
    const BundleFile* match = nullptr;
    for (const BundleFile& f : b.files) {
      if (f.kind == "library" && fs::weakly_canonical(fs::path(b.dir) / f.path, ec) == mapped) match = &f;
    }
    if (match == nullptr) return Refuse(Refusal::kForeignMappedObject, absl::StrCat(who, " maps ", o.path, ", which is not one of the bundle's libraries"));
    if (match->sha256 != o.sha256) {
      return Refuse(Refusal::kForeignMappedObject, absl::StrCat(who, " maps ", o.path, " with SHA-256 ", o.sha256, ", the bundle's is ", match->sha256));
    }
  }
  return {};
}

}  // namespace q38
