// The writer: byte-exact output, determinism, atomic replacement and refusal of bad input.
#include "worker/checkpoint/safetensors_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "worker/checkpoint/test_files.h"

namespace q38 {
namespace {

using testing_files::ReadFile;
using testing_files::ScratchDir;

TEST(SafetensorsWriter, KnownSmallFileExactBytes) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.Add("b", DType::kU8, {3}, {1, 2, 3});
  w.Add("a", DType::kF16, {1}, {0x00, 0x3C});
  w.SetMetadata("format", "pt");
  const std::string path = dir.File("small.safetensors");
  ASSERT_TRUE(w.Write(path).ok());

  // 137 bytes of JSON padded with 7 spaces to 144 = 0x90.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"data_offsets\":[0,2],\"dtype\":\"F16\",\"shape\":[1]},"
      "\"b\":{\"data_offsets\":[2,5],\"dtype\":\"U8\",\"shape\":[3]}}"
      "       ";
  ASSERT_EQ(header.size(), 144u);
  std::string expected("\x90\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x00\x3C\x01\x02\x03", 5);
  EXPECT_EQ(ReadFile(path), expected);
  EXPECT_EQ(w.size_bytes(), expected.size());
}

TEST(SafetensorsWriter, DeterministicRegardlessOfAddOrder) {
  ScratchDir dir;
  auto build = [](bool reverse) {
    SafetensorsWriter w;
    std::vector<TensorData> ts = {
        {"model.layers.0.w", DType::kBF16, {2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}},
        {"model.layers.1.w", DType::kF32, {1}, {9, 9, 9, 9}},
        {"lm_head.weight", DType::kI64, {1}, {1, 0, 0, 0, 0, 0, 0, 0}},
        {"empty", DType::kU8, {0}, {}},
    };
    if (reverse) std::reverse(ts.begin(), ts.end());
    for (auto& t : ts) w.Add(std::move(t));
    if (reverse) {
      w.SetMetadata("b", "2");
      w.SetMetadata("a", "1");
    } else {
      w.SetMetadata("a", "1");
      w.SetMetadata("b", "2");
    }
    return w;
  };
  ASSERT_TRUE(build(false).Write(dir.File("one")).ok());
  ASSERT_TRUE(build(true).Write(dir.File("two")).ok());
  ASSERT_TRUE(build(false).Write(dir.File("three")).ok());
  const std::string one = ReadFile(dir.File("one"));
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(one, ReadFile(dir.File("two")));
  EXPECT_EQ(one, ReadFile(dir.File("three")));
  EXPECT_EQ(one.size(), build(true).size_bytes());
}

TEST(SafetensorsWriter, HeaderPaddedToMultipleOfEight) {
  ScratchDir dir;
  for (int len = 1; len <= 9; ++len) {
    SafetensorsWriter w;
    w.Add(std::string(len, 'n'), DType::kU8, {1}, {7});
    const std::string path = dir.File("pad" + std::to_string(len));
    ASSERT_TRUE(w.Write(path).ok());
    const std::string bytes = ReadFile(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + n + 1);
    const std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  }
}

TEST(SafetensorsWriter, ReplacesExistingFileAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.File("x.safetensors");
  testing_files::WriteFile(path, "old contents");
  SafetensorsWriter w;
  w.Add("t", DType::kU8, {1}, {1});
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_EQ(ReadFile(path).size(), w.size_bytes());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsWriter, RefusesBadInput) {
  ScratchDir dir;
  const std::string path = dir.File("bad.safetensors");
  auto expect_refused = [&](const SafetensorsWriter& w, std::string_view needle) {
    absl::Status s = w.Write(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
    EXPECT_NE(s.message().find(path), std::string_view::npos) << s;
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  };
  {
    SafetensorsWriter w;
    w.Add("wrong_size", DType::kF32, {2}, {1, 2, 3});
    expect_refused(w, "wrong_size");
  }
  {
    SafetensorsWriter w;
    w.Add("twice", DType::kU8, {1}, {1});
    w.Add("twice", DType::kU8, {1}, {2});
    expect_refused(w, "twice");
  }
  {
    SafetensorsWriter w;
    w.Add("negative", DType::kU8, {-1}, {});
    expect_refused(w, "negative");
  }
  {
    SafetensorsWriter w;
    w.Add("__metadata__", DType::kU8, {1}, {1});
    expect_refused(w, "__metadata__");
  }
  {
    SafetensorsWriter w;
    w.Add("bad\xff", DType::kU8, {1}, {1});
    expect_refused(w, "UTF-8");
  }
}

TEST(SafetensorsWriter, MissingDirectoryIsAnError) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.Add("t", DType::kU8, {1}, {1});
  absl::Status s = w.Write(dir.File("no/such/dir/x.safetensors"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no/such/dir"), std::string_view::npos) << s;
}

}  // namespace
}  // namespace q38
