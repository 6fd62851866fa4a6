#include "worker/checkpoint/tensor_store.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/checkpoint/checkpoint_layout.h"
#include "worker/checkpoint/strict_json.h"

namespace q38 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Index files are a few MB even for the largest checkpoints.
constexpr uintmax_t kMaxIndexBytes = 100'000'000;

absl::StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot stat '", path.string(), "': ", ec.message()));
  }
  if (size > kMaxIndexBytes) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint index '", path.string(), "': ", size,
                                                   " bytes exceeds the limit of ", kMaxIndexBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return absl::InternalError(absl::StrCat("cannot read '", path.string(), "'"));
  return text.str();
}

// A shard name must be a plain file in the checkpoint directory: no separators, no "." or "..".
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

absl::Status TensorStore::AddFile(std::unique_ptr<SafetensorsFile> file) {
  for (const TensorView& t : file->tensors()) {
    auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is present in both '",
                                                     it->second->file, "' and '", t.file, "'"));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::Open(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory '", dir, "' does not exist"));
  }
  auto store = std::unique_ptr<TensorStore>(new TensorStore());
  const fs::path index_path = root / kCheckpointIndexFile;

  if (!fs::exists(index_path, ec)) {
    const fs::path single = root / kSingleCheckpointFile;
    if (!fs::exists(single, ec)) {
      return absl::NotFoundError(absl::StrCat("checkpoint directory '", dir, "' has neither ",
                                              kCheckpointIndexFile, " nor ",
                                              kSingleCheckpointFile));
    }
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single.string()));
    RETURN_IF_ERROR(store->AddFile(std::move(file)));
    return store;
  }

  const std::string where = absl::StrCat("checkpoint index '", index_path.string(), "'");
  ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(index_path));
  ASSIGN_OR_RETURN(const json index, ParseStrictJson(text, where));
  if (!index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  }
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": missing a \"weight_map\" object of tensor name to file"));
  }
  std::map<std::string, std::string> listed;  // tensor -> file name
  std::set<std::string> file_names;
  for (const auto& [name, value] : wm->items()) {
    if (!value.is_string() || !IsPlainFileName(value.get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor '", name, "' must map to a file name in '", dir, "', got ",
                       value.dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    listed.emplace(name, value.get<std::string>());
    file_names.insert(value.get<std::string>());
  }

  for (const std::string& name : file_names) {
    const fs::path path = root / name;
    if (!fs::is_regular_file(path, ec)) {
      std::string example;
      for (const auto& [t, f] : listed) {
        if (f == name) {
          example = t;
          break;
        }
      }
      return absl::NotFoundError(absl::StrCat(where, ": shard '", path.string(),
                                              "' (holding tensor '", example,
                                              "' among others) does not exist"));
    }
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path.string()));
    if (absl::Status s = store->AddFile(std::move(file)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }

  for (const auto& [name, file_name] : listed) {
    const std::string path = (root / file_name).string();
    const TensorView* t = store->Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", name, "' is listed in '",
                                                     path, "' but absent from it"));
    }
    if (t->file != path) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", name, "' is listed in '",
                                                     path, "' but absent from it; it is in '",
                                                     t->file, "'"));
    }
  }
  if (store->by_name_.size() != listed.size()) {
    for (const auto& [name, t] : store->by_name_) {
      if (!listed.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", name, "' in '", t->file,
                                                       "' is not listed in the index"));
      }
    }
  }
  return store;
}

const TensorView* TensorStore::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> TensorStore::Names() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) names.push_back(name);
  return names;
}

}  // namespace q38
