// Writing .safetensors files and sharded checkpoints, deterministically byte for byte: tensors in
// name order (so offsets ascend with names), header JSON with sorted keys and no spaces, padded
// with spaces to a multiple of 8 bytes, and no bytes between or after tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace q38 {

// A tensor held in memory, to be written.
struct TensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

class SafetensorsWriter {
 public:
  // Problems (a repeated name, a byte count that does not match the shape, a negative dimension,
  // a name that is not UTF-8 or is "__metadata__") are reported by Write, not here.
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void Add(TensorData tensor);
  // An entry of "__metadata__" (written only when there is at least one).
  void SetMetadata(std::string key, std::string value);

  // Writes `path`.tmp, flushes it to disk and renames it to `path`; on failure nothing is left at
  // `path`.tmp and `path` is untouched. InvalidArgument for bad contents, Internal for I/O errors.
  absl::Status Write(const std::string& path) const;
  // The exact size of the file Write would produce.
  size_t size_bytes() const;

 private:
  absl::Status Validate() const;
  // The header JSON padded with spaces to a multiple of 8.
  std::string Header() const;

  std::map<std::string, TensorData> tensors_;  // by name: the order they are written in
  std::map<std::string, std::string> metadata_;
  std::string duplicate_;  // first name added twice, if any
  bool has_duplicate_ = false;
};

// Writes `tensors` to `dir` (created if missing) as a Hugging Face checkpoint. Tensors are taken in
// name order and packed greedily into shards whose data sections hold at most max_shard_bytes; a
// tensor larger than that gets a shard of its own. Shards are named
// model-00001-of-0000N.safetensors and described by model.safetensors.index.json ({"metadata":
// {"total_size": <sum of tensor bytes>}, "weight_map": {name: file}}, keys sorted), written last.
// When everything fits in one shard the file is model.safetensors, with no index (an index left
// from an earlier write is removed so that the directory reads back as what was written).
absl::Status WriteShardedCheckpoint(const std::string& dir, std::vector<TensorData> tensors,
                                    size_t max_shard_bytes);

}  // namespace q38
