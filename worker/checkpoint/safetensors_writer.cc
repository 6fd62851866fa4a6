#include "worker/checkpoint/safetensors_writer.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "common/atomic_file.h"
#include "worker/checkpoint/checkpoint_layout.h"
#include "worker/checkpoint/strict_json.h"

namespace q38 {
namespace {

using nlohmann::json;

// Bytes a tensor of this shape and dtype must have, or nullopt for a negative dimension or an
// overflow.
std::optional<uint64_t> ExpectedBytes(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
  }
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

absl::Status ValidateTensor(const TensorData& t) {
  if (!IsValidUtf8(t.name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' is not UTF-8"));
  }
  if (t.name == "__metadata__") {
    return absl::InvalidArgumentError("a tensor cannot be named '__metadata__'");
  }
  const std::optional<uint64_t> want = ExpectedBytes(t.shape, t.dtype);
  if (!want) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "': shape has a negative dimension or overflows"));
  }
  if (*want != t.bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': shape and ",
                                                   std::string(DTypeName(t.dtype)), " need ", *want,
                                                   " bytes but ", t.bytes.size(), " were given"));
  }
  return absl::OkStatus();
}

}  // namespace

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  Add(TensorData{std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::Add(TensorData tensor) {
  std::string name = tensor.name;
  auto [it, inserted] = tensors_.emplace(std::move(name), std::move(tensor));
  if (!inserted && !has_duplicate_) {
    has_duplicate_ = true;
    duplicate_ = it->first;
  }
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

absl::Status SafetensorsWriter::Validate() const {
  if (has_duplicate_) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", duplicate_, "' was added twice"));
  }
  for (const auto& [name, t] : tensors_) RETURN_IF_ERROR(ValidateTensor(t));
  for (const auto& [key, value] : metadata_) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return absl::InvalidArgumentError(absl::StrCat("metadata entry '", key, "' is not UTF-8"));
    }
  }
  return absl::OkStatus();
}

std::string SafetensorsWriter::Header() const {
  json header = json::object();  // std::map underneath: keys come out sorted
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    const uint64_t end = offset + t.bytes.size();
    header[name] = json{{"dtype", std::string(DTypeName(t.dtype))},
                        {"shape", t.shape},
                        {"data_offsets", json::array({offset, end})}};
    offset = end;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  // Validate() has checked UTF-8 before Write; size_bytes() on bad input still gets a number.
  std::string s = header.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

size_t SafetensorsWriter::size_bytes() const {
  size_t n = 8 + Header().size();
  for (const auto& [name, t] : tensors_) n += t.bytes.size();
  return n;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  if (absl::Status s = Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("writing '", path, "': ", s.message()));
  }
  const std::string header = Header();
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));

  AtomicFileWriter out(path);
  RETURN_IF_ERROR(out.Open());
  RETURN_IF_ERROR(out.Append(prefix, sizeof(prefix)));
  RETURN_IF_ERROR(out.Append(header.data(), header.size()));
  for (const auto& [name, t] : tensors_)
    RETURN_IF_ERROR(out.Append(t.bytes.data(), t.bytes.size()));
  return out.Commit();
}

absl::Status WriteShardedCheckpoint(const std::string& dir, std::vector<TensorData> tensors,
                                    size_t max_shard_bytes) {
  if (max_shard_bytes == 0) {
    return absl::InvalidArgumentError("WriteShardedCheckpoint: max_shard_bytes must be positive");
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorData& a, const TensorData& b) { return a.name < b.name; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0 && tensors[i].name == tensors[i - 1].name) {
      return absl::InvalidArgumentError(absl::StrCat("writing checkpoint '", dir, "': tensor '",
                                                     tensors[i].name, "' appears twice"));
    }
    if (absl::Status s = ValidateTensor(tensors[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing checkpoint '", dir, "': ", s.message()));
    }
  }

  // Greedy packing in name order.
  std::vector<std::vector<TensorData*>> shards;
  size_t current = 0;
  for (TensorData& t : tensors) {
    if (shards.empty() || (current > 0 && current + t.bytes.size() > max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += t.bytes.size();
  }
  if (shards.empty()) shards.emplace_back();  // no tensors: one empty file
  if (shards.size() > 99999) {
    return absl::InvalidArgumentError(absl::StrCat(
        "writing checkpoint '", dir, "': ", shards.size(), " shards exceed the 99999 allowed"));
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create checkpoint directory '", dir, "': ", ec.message()));
  }
  const std::filesystem::path root(dir);
  const int count = static_cast<int>(shards.size());

  if (count == 1) {
    SafetensorsWriter w;
    for (TensorData* t : shards[0]) w.Add(std::move(*t));
    RETURN_IF_ERROR(w.Write((root / kSingleCheckpointFile).string()));
    std::filesystem::remove(root / kCheckpointIndexFile, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          "cannot remove stale '", (root / kCheckpointIndexFile).string(), "': ", ec.message()));
    }
    return absl::OkStatus();
  }

  json weight_map = json::object();
  uint64_t total_size = 0;
  for (int i = 0; i < count; ++i) {
    const std::string file = ShardFileName(i + 1, count);
    SafetensorsWriter w;
    for (TensorData* t : shards[i]) {
      weight_map[t->name] = file;
      total_size += t->bytes.size();
      w.Add(std::move(*t));
    }
    RETURN_IF_ERROR(w.Write((root / file).string()));
  }
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
  AtomicFileWriter out((root / kCheckpointIndexFile).string());
  RETURN_IF_ERROR(out.Open());
  RETURN_IF_ERROR(out.Append(text.data(), text.size()));
  return out.Commit();
}

}  // namespace q38
