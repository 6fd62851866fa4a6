// Helpers for the checkpoint tests: a scratch directory that removes itself, and raw file bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace q38::testing_files {

// A fresh directory under testing::TempDir(), removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, absl::string_view bytes);
std::string ReadFile(const std::string& path);

// A safetensors file with exactly this header text (no padding added) and data section.
std::string RawSafetensors(absl::string_view header, absl::string_view data);
// The same with an arbitrary value in the 8-byte length prefix.
std::string RawSafetensorsWithLength(uint64_t length, absl::string_view header,
                                     absl::string_view data);

}  // namespace q38::testing_files
