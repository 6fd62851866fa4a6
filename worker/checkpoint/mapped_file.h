// A whole file mapped read-only (PROT_READ, MAP_PRIVATE), unmapped when the object dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace q38 {

class MappedFile {
 public:
  // NotFound for a missing file; InvalidArgument for something that is not a regular file;
  // Internal for other system errors. Every message names the path. An empty file is mapped
  // as zero bytes with data() == nullptr.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace q38
