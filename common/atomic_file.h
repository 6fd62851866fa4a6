// Writing a file so that it appears complete or not at all: bytes go to `path`.tmp, which is
// flushed to disk and renamed over `path` by Commit. Destroying an uncommitted writer removes the
// temporary file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace q38 {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Each returns Internal naming the file on a system error; after an error the others fail too.
  absl::Status Open();
  absl::Status Append(const void* data, size_t n);
  absl::Status Commit();

 private:
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `contents` through an AtomicFileWriter.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace q38
