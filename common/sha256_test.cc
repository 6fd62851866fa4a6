#include "common/sha256.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, FileMatchesBytes) {
  const std::string path = ::testing::TempDir() + "/sha256_test.bin";
  std::string data(200000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  std::ofstream(path, std::ios::binary) << data;
  EXPECT_EQ(*Sha256File(path), Sha256Hex(data));
  std::remove(path.c_str());
  EXPECT_EQ(Sha256File(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace q38
