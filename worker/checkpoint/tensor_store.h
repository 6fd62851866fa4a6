// A checkpoint directory: either model.safetensors alone, or model.safetensors.index.json and the
// shard files its weight_map names. Every file is mapped and validated at Open and stays mapped
// for the store's lifetime, so views from Find live as long as the store.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/safetensors.h"

namespace q38 {

class TensorStore {
 public:
  // With an index present it wins over model.safetensors. The index must be a JSON object whose
  // "weight_map" maps each tensor name to a plain file name in `dir`; every tensor must be in
  // exactly the file the index names, and every tensor in those files must be listed. Errors:
  // NotFound for a missing directory, checkpoint or shard; the errors of SafetensorsFile::Open
  // for a bad shard; InvalidArgument for a bad index or a mismatch between index and files,
  // naming the index, the tensor and both files involved.
  static absl::StatusOr<std::unique_ptr<TensorStore>> Open(const std::string& dir);

  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  const TensorView* Find(std::string_view name) const;  // nullptr if absent
  std::vector<std::string> Names() const;               // sorted
  size_t size() const { return by_name_.size(); }
  // The mapped files, sorted by path.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  TensorStore() = default;
  // Adds every tensor of `file`; InvalidArgument if a name is already present from another file.
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> by_name_;
};

}  // namespace q38
