// Checkpoint directories: single file, sharded round trip, and every index error.
#include "worker/checkpoint/tensor_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/checkpoint_layout.h"
#include "worker/checkpoint/safetensors_writer.h"
#include "worker/checkpoint/test_files.h"

namespace q38 {
namespace {

namespace fs = std::filesystem;
using testing_files::ReadFile;
using testing_files::ScratchDir;
using testing_files::WriteFile;

// Ten tensors of 100 bytes each (U8 [10, 10]), named "t0".."t9", byte value = index.
std::vector<TensorData> TenTensors() {
  std::vector<TensorData> ts;
  for (int i = 9; i >= 0; --i) {  // deliberately out of order
    ts.push_back({absl::StrCat("t", i), DType::kU8, {10, 10}, std::vector<uint8_t>(100, i)});
  }
  return ts;
}

void ExpectContains(const absl::Status& s, std::initializer_list<std::string_view> needles) {
  const std::string msg(s.message());
  for (std::string_view n : needles) {
    EXPECT_NE(msg.find(n), std::string_view::npos) << "missing '" << n << "' in " << s;
  }
}

TEST(ShardFileName, Format) {
  EXPECT_EQ(ShardFileName(1, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(ShardFileName(12, 345), "model-00012-of-00345.safetensors");
}

TEST(TensorStore, SingleFileCheckpoint) {
  ScratchDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TenTensors(), 1 << 20).ok());
  EXPECT_TRUE(fs::exists(dir.File(kSingleCheckpointFile)));
  EXPECT_FALSE(fs::exists(dir.File(kCheckpointIndexFile)));
  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 10u);
  const TensorView* t3 = (*store)->Find("t3");
  ASSERT_NE(t3, nullptr);
  EXPECT_EQ(t3->file, dir.File(kSingleCheckpointFile));
  EXPECT_EQ(t3->data[99], 3);
  EXPECT_EQ((*store)->Find("t10"), nullptr);
}

TEST(TensorStore, ShardedRoundTrip) {
  ScratchDir dir;
  // 250-byte shards hold two 100-byte tensors each: five shards.
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TenTensors(), 250).ok());
  EXPECT_FALSE(fs::exists(dir.File(kSingleCheckpointFile)));
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(fs::exists(dir.File(ShardFileName(i, 5)))) << i;
  EXPECT_FALSE(fs::exists(dir.File(ShardFileName(1, 6))));

  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> want;
  for (int i = 0; i < 10; ++i) want.push_back(absl::StrCat("t", i));
  EXPECT_EQ((*store)->Names(), want);
  EXPECT_EQ((*store)->files().size(), 5u);
  for (int i = 0; i < 10; ++i) {
    const TensorView* t = (*store)->Find(absl::StrCat("t", i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->file, dir.File(ShardFileName(i / 2 + 1, 5)));
    EXPECT_EQ(t->shape, (std::vector<int64_t>{10, 10}));
    ASSERT_EQ(t->nbytes, 100u);
    EXPECT_EQ(t->data[0], i);
    EXPECT_EQ(t->data[99], i);
  }
}

TEST(TensorStore, IndexIsDeterministicAndSorted) {
  ScratchDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TenTensors(), 250).ok());
  const std::string index = ReadFile(dir.File(kCheckpointIndexFile));
  std::string want = "{\n  \"metadata\": {\n    \"total_size\": 1000\n  },\n  \"weight_map\": {\n";
  for (int i = 0; i < 10; ++i) {
    absl::StrAppend(&want, "    \"t", i, "\": \"", ShardFileName(i / 2 + 1, 5), "\"",
                    i < 9 ? ",\n" : "\n");
  }
  want += "  }\n}\n";
  EXPECT_EQ(index, want);

  ScratchDir again;
  ASSERT_TRUE(WriteShardedCheckpoint(again.path(), TenTensors(), 250).ok());
  for (std::string name : {std::string(kCheckpointIndexFile), ShardFileName(3, 5)}) {
    EXPECT_EQ(ReadFile(dir.File(name)), ReadFile(again.File(name))) << name;
  }
}

TEST(TensorStore, OversizeTensorGetsItsOwnShard) {
  ScratchDir dir;
  std::vector<TensorData> ts = {{"a", DType::kU8, {10}, std::vector<uint8_t>(10, 1)},
                                {"b", DType::kU8, {500}, std::vector<uint8_t>(500, 2)},
                                {"c", DType::kU8, {10}, std::vector<uint8_t>(10, 3)},
                                {"d", DType::kU8, {10}, std::vector<uint8_t>(10, 4)}};
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), ts, 100).ok());
  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Find("a")->file, dir.File(ShardFileName(1, 3)));
  EXPECT_EQ((*store)->Find("b")->file, dir.File(ShardFileName(2, 3)));
  EXPECT_EQ((*store)->Find("c")->file, dir.File(ShardFileName(3, 3)));
  EXPECT_EQ((*store)->Find("d")->file, dir.File(ShardFileName(3, 3)));
}

TEST(TensorStore, SingleWriteRemovesStaleIndex) {
  ScratchDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TenTensors(), 250).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TenTensors(), 1 << 20).ok());
  EXPECT_FALSE(fs::exists(dir.File(kCheckpointIndexFile)));
  auto store = TensorStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->files().size(), 1u);
}

TEST(TensorStore, WriterRefusesBadInput) {
  ScratchDir dir;
  auto ts = TenTensors();
  ts.push_back(ts[0]);
  absl::Status s = WriteShardedCheckpoint(dir.path(), ts, 250);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {"'t9' appears twice"});
  s = WriteShardedCheckpoint(dir.path(), TenTensors(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ts = TenTensors();
  ts[3].bytes.pop_back();
  s = WriteShardedCheckpoint(dir.path(), ts, 250);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {"tensor 't6'", "need 100 bytes but 99"});
}

TEST(TensorStore, MissingDirectoryOrCheckpoint) {
  ScratchDir dir;
  auto store = TensorStore::Open(dir.File("nope"));
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  ExpectContains(store.status(), {"nope"});
  store = TensorStore::Open(dir.path());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  ExpectContains(store.status(), {dir.path(), kSingleCheckpointFile});
}

TEST(TensorStore, CorruptSingleFileNamesIt) {
  ScratchDir dir;
  WriteFile(dir.File(kSingleCheckpointFile), "abc");
  auto store = TensorStore::Open(dir.path());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  ExpectContains(store.status(), {dir.File(kSingleCheckpointFile)});
}

// A sharded checkpoint whose index the test then rewrites.
class IndexErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteShardedCheckpoint(dir_.path(), TenTensors(), 250).ok());
  }
  std::string Index() const { return dir_.File(kCheckpointIndexFile); }
  std::string Shard(int i) const { return dir_.File(ShardFileName(i, 5)); }
  // Writes `weight_map` (a JSON object body) into the index.
  void SetWeightMap(absl::string_view body) {
    WriteFile(Index(),
              absl::StrCat(R"({"metadata":{"total_size":1000},"weight_map":{)", body, "}}"));
  }
  // The weight map as written, with `name` mapped to `file` instead (or dropped if file is "").
  std::string WeightMapWith(std::string_view name, std::string_view file) const {
    std::string body;
    for (int i = 0; i < 10; ++i) {
      const std::string t = absl::StrCat("t", i);
      std::string f = ShardFileName(i / 2 + 1, 5);
      if (t == name) {
        if (file.empty()) continue;
        f = std::string(file);
      }
      absl::StrAppend(&body, body.empty() ? "" : ",", "\"", t, "\":\"", f, "\"");
    }
    return body;
  }
  absl::Status OpenStatus() { return TensorStore::Open(dir_.path()).status(); }

  ScratchDir dir_;
};

TEST_F(IndexErrors, IndexNotJson) {
  WriteFile(Index(), "{\"weight_map\": ");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {Index(), "not valid JSON"});
  WriteFile(Index(), "{\"weight_map\":{\"t\xff\":\"x\"}}");
  ExpectContains(OpenStatus(), {Index(), "UTF-8"});
}

TEST_F(IndexErrors, IndexNotObjectOrNoWeightMap) {
  for (absl::string_view text :
       {"[]", "{}", R"({"weight_map":[]})", R"({"weight_map":"x"})", R"({"metadata":{}})"}) {
    WriteFile(Index(), text);
    absl::Status s = OpenStatus();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    ExpectContains(s, {Index()});
  }
}

TEST_F(IndexErrors, WeightMapValueNotAFileName) {
  for (absl::string_view bad : {"1", "null", "\"\"", "\"../x.safetensors\"", "\"/etc/passwd\"",
                                "\"sub/x.safetensors\"", "\"..\"", "[\"a\"]"}) {
    SetWeightMap(absl::StrCat(WeightMapWith("t4", ""), ",\"t4\":", bad));
    absl::Status s = OpenStatus();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    ExpectContains(s, {Index(), "tensor 't4'", "must map to a file name"});
  }
}

TEST_F(IndexErrors, DuplicateNameInWeightMap) {
  SetWeightMap(absl::StrCat(WeightMapWith("", ""), ",\"t0\":\"", ShardFileName(1, 5), "\""));
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {Index(), "'weight_map' / 't0'"});
}

TEST_F(IndexErrors, ReferencedFileMissing) {
  SetWeightMap(WeightMapWith("t7", "model-gone.safetensors"));
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  ExpectContains(s, {Index(), dir_.File("model-gone.safetensors"), "'t7'", "does not exist"});
}

TEST_F(IndexErrors, ListedTensorAbsentFromItsFile) {
  // t0 lives in shard 1; the index claims shard 2, which lacks it.
  SetWeightMap(WeightMapWith("t0", ShardFileName(2, 5)));
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {"tensor 't0'", "listed in '" + Shard(2) + "' but absent from it",
                     "it is in '" + Shard(1) + "'"});
}

TEST_F(IndexErrors, ListedTensorInNoFile) {
  SetWeightMap(absl::StrCat(WeightMapWith("", ""), ",\"ghost\":\"", ShardFileName(3, 5), "\""));
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {Index(), "tensor 'ghost'", "listed in '" + Shard(3) + "' but absent"});
}

TEST_F(IndexErrors, TensorPresentInTwoFiles) {
  // Rewrite shard 2 so that it also holds t0 (shard 1 has it too).
  SafetensorsWriter w;
  w.Add("t0", DType::kU8, {10, 10}, std::vector<uint8_t>(100, 0));
  w.Add("t2", DType::kU8, {10, 10}, std::vector<uint8_t>(100, 2));
  w.Add("t3", DType::kU8, {10, 10}, std::vector<uint8_t>(100, 3));
  ASSERT_TRUE(w.Write(Shard(2)).ok());
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {Index(), "tensor 't0'", "both '" + Shard(1) + "' and '" + Shard(2) + "'"});
}

TEST_F(IndexErrors, TensorInFileButNotListed) {
  SetWeightMap(WeightMapWith("t5", ""));
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(s, {Index(), "tensor 't5'", Shard(3), "not listed in the index"});
}

TEST_F(IndexErrors, CorruptShardNamesIt) {
  std::string bytes = ReadFile(Shard(4));
  bytes.resize(bytes.size() - 1);  // truncated by one byte
  WriteFile(Shard(4), bytes);
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  ExpectContains(s, {Shard(4), "tensor 't7'", "truncated"});
}

}  // namespace
}  // namespace q38
