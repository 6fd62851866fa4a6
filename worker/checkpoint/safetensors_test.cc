// Reading files the writer produced: every dtype, zero-size and scalar tensors, metadata.
#include "worker/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "worker/checkpoint/safetensors_writer.h"
#include "worker/checkpoint/test_files.h"

namespace q38 {
namespace {

using testing_files::ScratchDir;

constexpr DType kAllDtypes[] = {DType::kF32, DType::kF16, DType::kBF16,  DType::kU8,
                                DType::kI32, DType::kI64, DType::kF8E4M3};

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Safetensors, RoundTripEveryDtype) {
  ScratchDir dir;
  SafetensorsWriter w;
  std::vector<TensorData> expected;
  int i = 0;
  for (DType t : kAllDtypes) {
    const std::vector<int64_t> shape = {2, 3 + i};
    const size_t n = static_cast<size_t>(2 * (3 + i)) * DTypeSize(t);
    TensorData d{"t." + std::string(DTypeName(t)), t, shape, RandomBytes(n, 100 + i)};
    expected.push_back(d);
    w.Add(d);
    ++i;
  }
  const std::string path = dir.File("all.safetensors");
  ASSERT_TRUE(w.Write(path).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), expected.size());
  EXPECT_EQ((*file)->file_size(), w.size_bytes());
  EXPECT_TRUE((*file)->metadata().empty());
  for (const TensorData& d : expected) {
    const TensorView* v = (*file)->Find(d.name);
    ASSERT_NE(v, nullptr) << d.name;
    EXPECT_EQ(v->name, d.name);
    EXPECT_EQ(v->dtype, d.dtype) << d.name;
    EXPECT_EQ(v->shape, d.shape) << d.name;
    EXPECT_EQ(v->numel(), d.shape[0] * d.shape[1]);
    EXPECT_EQ(v->file, path);
    ASSERT_EQ(v->nbytes, d.bytes.size()) << d.name;
    EXPECT_EQ(std::memcmp(v->data, d.bytes.data(), v->nbytes), 0) << d.name;
  }
  EXPECT_EQ((*file)->Find("absent"), nullptr);
  EXPECT_EQ((*file)->Find("t."), nullptr);
}

TEST(Safetensors, ZeroSizeAndScalarTensors) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.Add("empty", DType::kBF16, {0}, {});
  w.Add("empty2d", DType::kI64, {3, 0}, {});
  w.Add("scalar", DType::kF32, {}, {0x00, 0x00, 0x80, 0x3F});
  w.Add("z_last_empty", DType::kU8, {0, 5}, {});
  const std::string path = dir.File("zero.safetensors");
  ASSERT_TRUE(w.Write(path).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 4u);
  const TensorView* e = (*file)->Find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->shape, std::vector<int64_t>{0});
  EXPECT_EQ((*file)->Find("empty2d")->shape, (std::vector<int64_t>{3, 0}));
  const TensorView* s = (*file)->Find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel(), 1);
  float f;
  std::memcpy(&f, s->data, 4);
  EXPECT_EQ(f, 1.0f);
  EXPECT_EQ((*file)->Find("z_last_empty")->nbytes, 0u);
}

TEST(Safetensors, EmptyFileHasNoTensors) {
  ScratchDir dir;
  SafetensorsWriter w;
  const std::string path = dir.File("none.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_EQ((*file)->file_size(), 16u);  // "{}" padded to 8
}

TEST(Safetensors, MetadataAndHeaderRoundTrip) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.SetMetadata("note", "ünïcödé");
  w.Add("x", DType::kI32, {1}, {1, 0, 0, 0});
  const std::string path = dir.File("meta.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::map<std::string, std::string> want = {{"format", "pt"}, {"note", "ünïcödé"}};
  EXPECT_EQ((*file)->metadata(), want);
  EXPECT_EQ((*file)->header().size() % 8, 0u);
  EXPECT_EQ((*file)->header().front(), '{');
  EXPECT_NE((*file)->header().find("\"__metadata__\""), std::string_view::npos);
}

TEST(Safetensors, TensorsAreInDataOrder) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.Add("c", DType::kU8, {1}, {3});
  w.Add("a", DType::kU8, {1}, {1});
  w.Add("b", DType::kU8, {0}, {});
  const std::string path = dir.File("order.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& ts = (*file)->tensors();
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts[0].name, "a");
  EXPECT_EQ(ts[1].name, "b");
  EXPECT_EQ(ts[2].name, "c");
  EXPECT_EQ(ts[0].data[0], 1);
  EXPECT_EQ(ts[2].data[0], 3);
}

TEST(Safetensors, MissingFileIsNotFound) {
  ScratchDir dir;
  const std::string path = dir.File("nope.safetensors");
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find(path), std::string_view::npos);
}

TEST(Safetensors, DirectoryIsRefused) {
  ScratchDir dir;
  auto file = SafetensorsFile::Open(dir.path());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find(dir.path()), std::string_view::npos);
}

}  // namespace
}  // namespace q38
