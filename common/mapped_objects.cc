#include "common/mapped_objects.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace q38 {
namespace {

bool IsElf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

}  // namespace

absl::StatusOr<std::vector<MappedObject>> MappedSharedObjects(const std::string& maps_path, const std::string& exe) {
  std::ifstream maps(maps_path);
  if (!maps) return absl::NotFoundError(absl::StrCat("cannot read ", maps_path));
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::canonical(exe, ec);
  const bool know_self = !ec;
  std::set<std::string> paths;
  // address perms offset dev inode pathname: the path is the sixth field and may hold spaces.
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string address, perms, offset, dev, inode;
    fields >> address >> perms >> offset >> dev >> inode;
    std::string path;
    std::getline(fields >> std::ws, path);
    if (path.empty() || path[0] != '/' || path.ends_with(" (deleted)")) continue;
    paths.insert(path);
  }
  std::vector<MappedObject> out;
  for (const std::string& path : paths) {
    if (know_self && std::filesystem::equivalent(path, self, ec)) continue;
    if (!IsElf(path)) continue;
    absl::StatusOr<std::string> sha = Sha256File(path);
    if (!sha.ok()) return sha.status();
    out.push_back({path, *std::move(sha)});
  }
  return out;
}

}  // namespace q38
