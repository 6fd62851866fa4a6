#include "worker/checkpoint/test_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace q38::testing_files {

ScratchDir::ScratchDir() {
  std::string tmpl = ::testing::TempDir();
  if (tmpl.empty() || tmpl.back() != '/') tmpl += '/';
  tmpl += "q38_checkpoint_XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  if (made == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string RawSafetensorsWithLength(uint64_t length, absl::string_view header,
                                     absl::string_view data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));
  out.append(header.data(), header.size());
  out.append(data.data(), data.size());
  return out;
}

std::string RawSafetensors(absl::string_view header, absl::string_view data) {
  return RawSafetensorsWithLength(header.size(), header, data);
}

}  // namespace q38::testing_files
