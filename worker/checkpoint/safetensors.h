// Reading one .safetensors file: the whole file is memory-mapped and its header validated in full
// at Open, before any tensor byte is read. Layout: 8-byte little-endian header length N, N bytes of
// UTF-8 JSON, then the data section, which the tensors must tile exactly from offset 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/mapped_file.h"
#include "worker/checkpoint/tensor_view.h"

namespace q38 {

// Headers longer than this are refused (the limit Hugging Face's safetensors uses).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors name the file and, where one is involved, the tensor:
  //   NotFound          the file does not exist;
  //   DataLoss          the file's size disagrees with its header (shorter than 8 bytes, header
  //                     or a tensor running past the end, unused bytes after the last tensor);
  //   InvalidArgument   anything else malformed (header length over the limit, header not a UTF-8
  //                     JSON object starting with '{', bad entries, dtypes, shapes or offsets,
  //                     overlaps, gaps, repeated names, a bad "__metadata__").
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return mapping_->path(); }
  // In data order (ascending offset; name order for equal offsets).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(std::string_view name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }  // "__metadata__"

  // The header JSON exactly as stored (including any padding), e.g. for fingerprints.
  std::string_view header() const;
  // The data section after the header, which the tensors tile exactly (e.g. to hash the weights).
  std::string_view data() const;
  size_t file_size() const { return mapping_->size(); }

 private:
  explicit SafetensorsFile(std::unique_ptr<MappedFile> mapping) : mapping_(std::move(mapping)) {}

  std::unique_ptr<MappedFile> mapping_;
  size_t header_bytes_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace q38
