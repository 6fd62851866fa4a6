// Every header rule SafetensorsFile::Open enforces, one test each, on hand-made files. Each error
// must carry the right code and name the file and, where one is involved, the tensor.
#include <gtest/gtest.h>

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/checkpoint/test_files.h"

namespace q38 {
namespace {

using absl::StatusCode;
using testing_files::RawSafetensors;
using testing_files::RawSafetensorsWithLength;
using testing_files::ScratchDir;

// One header entry.
std::string Entry(absl::string_view dtype, absl::string_view shape, absl::string_view offsets) {
  return absl::StrCat(R"({"dtype":")", dtype, R"(","shape":)", shape, R"(,"data_offsets":)",
                      offsets, "}");
}

class Validation : public ::testing::Test {
 protected:
  // Writes `bytes` to a fresh file and opens it; the open must fail with `code` and a message
  // that names the file and contains every needle.
  void ExpectRefused(absl::string_view bytes, StatusCode code,
                     std::initializer_list<std::string_view> needles) {
    const std::string path = dir_.File(absl::StrCat("case", ++count_, ".safetensors"));
    testing_files::WriteFile(path, bytes);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << "accepted: " << bytes;
    const absl::Status& s = file.status();
    const std::string msg(s.message());
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(msg.find(absl::StrCat("'", path, "'")), std::string::npos) << s;
    for (std::string_view n : needles) {
      EXPECT_NE(msg.find(n), std::string_view::npos) << "missing '" << n << "' in " << s;
    }
  }
  // A header with one tensor "w" and `data` as the data section.
  void ExpectEntryRefused(const std::string& entry, absl::string_view data, StatusCode code,
                          std::initializer_list<std::string_view> needles) {
    ExpectRefused(RawSafetensors(absl::StrCat(R"({"w":)", entry, "}"), data), code, needles);
  }
  void ExpectAccepted(absl::string_view bytes) {
    const std::string path = dir_.File(absl::StrCat("case", ++count_, ".safetensors"));
    testing_files::WriteFile(path, bytes);
    auto file = SafetensorsFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
  }

  ScratchDir dir_;
  int count_ = 0;
};

TEST_F(Validation, FileShorterThanEightBytes) {
  ExpectRefused("", StatusCode::kDataLoss, {"shorter than the 8-byte"});
  ExpectRefused(std::string("\x02\0\0\0\0\0\0", 7), StatusCode::kDataLoss, {"7 bytes"});
}

TEST_F(Validation, HeaderLengthLargerThanFile) {
  ExpectRefused(RawSafetensorsWithLength(100, "{}", ""), StatusCode::kDataLoss,
                {"header length 100", "runs past the end"});
  // One byte too many.
  ExpectRefused(RawSafetensorsWithLength(3, "{}", ""), StatusCode::kDataLoss, {"header length 3"});
  ExpectRefused(RawSafetensorsWithLength(~uint64_t{0}, "{}", ""), StatusCode::kInvalidArgument,
                {"exceeds the limit"});
}

TEST_F(Validation, HeaderLengthAbsurd) {
  ExpectRefused(RawSafetensorsWithLength(100'000'001, "{}", ""), StatusCode::kInvalidArgument,
                {"header length 100000001", "exceeds the limit"});
}

TEST_F(Validation, HeaderNotUtf8) {
  const std::string ok_entry = Entry("U8", "[0]", "[0,0]");
  ExpectRefused(RawSafetensors(absl::StrCat("{\"w\xff\":", ok_entry, "}"), ""),
                StatusCode::kInvalidArgument, {"not valid UTF-8"});
  // Overlong '/', a lone surrogate, and a truncated sequence.
  for (absl::string_view bad : {"\xc0\xaf", "\xed\xa0\x80", "\xe2\x82"}) {
    ExpectRefused(RawSafetensors(absl::StrCat("{\"w", bad, "\":", ok_entry, "}"), ""),
                  StatusCode::kInvalidArgument, {"not valid UTF-8"});
  }
  // Real UTF-8 in a name is fine.
  ExpectAccepted(RawSafetensors(absl::StrCat("{\"w\xc3\xa9\":", ok_entry, "}"), ""));
}

TEST_F(Validation, HeaderNotJson) {
  ExpectRefused(RawSafetensors(R"({"w":)", ""), StatusCode::kInvalidArgument,
                {"header is not valid JSON"});
  ExpectRefused(RawSafetensors(R"({"w":{}} x)", ""), StatusCode::kInvalidArgument,
                {"header is not valid JSON"});
  ExpectRefused(RawSafetensors(R"({"w":{/*c*/}})", ""), StatusCode::kInvalidArgument,
                {"header is not valid JSON"});
}

TEST_F(Validation, HeaderNotAnObject) {
  for (absl::string_view h : {"[1,2]", "\"s\"", "", " {}", "\xef\xbb\xbf{}", "null"}) {
    ExpectRefused(RawSafetensors(h, ""), StatusCode::kInvalidArgument, {"does not start with '{'"});
  }
}

TEST_F(Validation, EntryNotAnObject) {
  ExpectEntryRefused("[1,2]", "", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "entry must be an object"});
  ExpectEntryRefused("\"F32\"", "", StatusCode::kInvalidArgument, {"tensor 'w'"});
}

TEST_F(Validation, EntryMissingKey) {
  ExpectEntryRefused(R"({"shape":[1],"data_offsets":[0,1]})", "x", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "missing key \"dtype\""});
  ExpectEntryRefused(R"({"dtype":"U8","data_offsets":[0,1]})", "x", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "missing key \"shape\""});
  ExpectEntryRefused(R"({"dtype":"U8","shape":[1]})", "x", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "missing key \"data_offsets\""});
}

TEST_F(Validation, EntryExtraKey) {
  ExpectEntryRefused(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1],"stride":[1]})", "x",
                     StatusCode::kInvalidArgument, {"tensor 'w'", "unexpected key \"stride\""});
}

TEST_F(Validation, UnknownDtype) {
  for (absl::string_view d : {"F64", "BOOL", "F8_E5M2", "I8", "U16", "f32", ""}) {
    ExpectEntryRefused(Entry(d, "[1]", "[0,1]"), "x", StatusCode::kInvalidArgument,
                       {"tensor 'w'", "unsupported dtype"});
  }
  ExpectEntryRefused(R"({"dtype":4,"shape":[1],"data_offsets":[0,1]})", "x",
                     StatusCode::kInvalidArgument, {"tensor 'w'", "dtype must be a string"});
  // Every accepted spelling opens.
  for (absl::string_view d : {"BF16", "F16", "F32", "U8", "I32", "I64", "F8_E4M3"}) {
    ExpectAccepted(RawSafetensors(absl::StrCat(R"({"w":)", Entry(d, "[0]", "[0,0]"), "}"), ""));
  }
}

TEST_F(Validation, ShapeNotListOfNonNegativeIntegers) {
  for (absl::string_view shape :
       {"3", "null", "\"[1]\"", "[-1]", "[1.5]", "[2.0]", "[\"2\"]", "[true]", "[[1]]",
        "[18446744073709551615]", "[100000000000000000000]", "{}"}) {
    ExpectEntryRefused(Entry("U8", shape, "[0,1]"), "x", StatusCode::kInvalidArgument,
                       {"tensor 'w'", "shape must be a list of non-negative integers"});
  }
}

TEST_F(Validation, ShapeElementCountOverflow) {
  // 2^32 · 2^32 overflows 64 bits; 2^62 · 2 leaves int64; 2^61 F32 elements overflow in bytes.
  ExpectEntryRefused(Entry("U8", "[4294967296,4294967296]", "[0,1]"), "x",
                     StatusCode::kInvalidArgument, {"tensor 'w'", "too many elements"});
  ExpectEntryRefused(Entry("U8", "[4611686018427387904,2]", "[0,1]"), "x",
                     StatusCode::kInvalidArgument, {"tensor 'w'", "too many elements"});
  ExpectEntryRefused(Entry("F32", "[2305843009213693952]", "[0,1]"), "x",
                     StatusCode::kInvalidArgument, {"tensor 'w'", "too large in bytes"});
  // A zero dimension makes any other dimension harmless.
  ExpectAccepted(RawSafetensors(
      absl::StrCat(R"({"w":)", Entry("F32", "[9223372036854775807,0]", "[0,0]"), "}"), ""));
}

TEST_F(Validation, DataOffsetsNotTwoIntegers) {
  for (absl::string_view off : {"[0]", "[0,1,2]", "[]", "\"0,1\"", "[\"0\",1]", "[-1,1]", "[0.0,1]",
                                "[0,1.0]", "null", "[0,18446744073709551615]"}) {
    ExpectEntryRefused(Entry("U8", "[1]", off), "x", StatusCode::kInvalidArgument,
                       {"tensor 'w'", "data_offsets must be two non-negative integers"});
  }
}

TEST_F(Validation, DataOffsetsEndBeforeBegin) {
  ExpectEntryRefused(Entry("U8", "[1]", "[1,0]"), "x", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "end before they begin"});
}

TEST_F(Validation, DataOffsetsPastDataSection) {
  ExpectEntryRefused(Entry("F32", "[2]", "[0,8]"), "abcd", StatusCode::kDataLoss,
                     {"tensor 'w'", "run past the end of the data section (4 bytes)"});
}

TEST_F(Validation, ByteLengthDisagreesWithShape) {
  ExpectEntryRefused(Entry("F32", "[3]", "[0,8]"), "abcdefgh", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "needs 12 bytes", "hold 8"});
  ExpectEntryRefused(Entry("BF16", "[0]", "[0,2]"), "ab", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "needs 0 bytes"});
  ExpectEntryRefused(Entry("I64", "[]", "[0,4]"), "abcd", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "needs 8 bytes"});
}

TEST_F(Validation, OverlappingTensors) {
  ExpectRefused(RawSafetensors(absl::StrCat(R"({"a":)", Entry("U8", "[8]", "[0,8]"), R"(,"b":)",
                                            Entry("U8", "[8]", "[4,12]"), "}"),
                               "0123456789ab"),
                StatusCode::kInvalidArgument, {"'a' [0, 8)", "'b' [4, 12)", "overlap"});
  // The same region twice.
  ExpectRefused(RawSafetensors(absl::StrCat(R"({"a":)", Entry("U8", "[4]", "[0,4]"), R"(,"b":)",
                                            Entry("U8", "[4]", "[0,4]"), "}"),
                               "0123"),
                StatusCode::kInvalidArgument, {"'a'", "'b'", "overlap"});
  // An empty tensor inside another one.
  ExpectRefused(RawSafetensors(absl::StrCat(R"({"a":)", Entry("U8", "[4]", "[0,4]"), R"(,"e":)",
                                            Entry("U8", "[0]", "[2,2]"), "}"),
                               "0123"),
                StatusCode::kInvalidArgument, {"'a'", "'e'", "overlap"});
}

TEST_F(Validation, GapBetweenTensors) {
  ExpectRefused(RawSafetensors(absl::StrCat(R"({"a":)", Entry("U8", "[4]", "[0,4]"), R"(,"b":)",
                                            Entry("U8", "[4]", "[8,12]"), "}"),
                               "0123456789ab"),
                StatusCode::kInvalidArgument, {"tensor 'b'", "gap of 4", "after tensor 'a'"});
  ExpectEntryRefused(Entry("U8", "[4]", "[4,8]"), "01234567", StatusCode::kInvalidArgument,
                     {"tensor 'w'", "gap of 4", "at the start"});
}

TEST_F(Validation, TrailingBytesAfterLastTensor) {
  ExpectEntryRefused(Entry("U8", "[4]", "[0,4]"), "012345", StatusCode::kDataLoss,
                     {"holds 6 bytes", "cover 4", "2 trailing bytes"});
  ExpectRefused(RawSafetensors("{}", "x"), StatusCode::kDataLoss, {"1 trailing bytes"});
}

TEST_F(Validation, DuplicateTensorNames) {
  ExpectRefused(RawSafetensors(absl::StrCat(R"({"w":)", Entry("U8", "[1]", "[0,1]"), R"(,"w":)",
                                            Entry("U8", "[1]", "[1,2]"), "}"),
                               "xy"),
                StatusCode::kInvalidArgument, {"repeats the key 'w'"});
}

TEST_F(Validation, DuplicateKeyInsideEntry) {
  ExpectEntryRefused(R"({"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]})", "x",
                     StatusCode::kInvalidArgument, {"'w' / 'dtype'"});
}

TEST_F(Validation, MetadataMustMapStringsToStrings) {
  const std::string empty = Entry("U8", "[0]", "[0,0]");
  for (absl::string_view meta : {"\"pt\"", "null", "[\"a\"]", "1"}) {
    ExpectRefused(
        RawSafetensors(absl::StrCat(R"({"__metadata__":)", meta, R"(,"w":)", empty, "}"), ""),
        StatusCode::kInvalidArgument, {"\"__metadata__\" must be an object of strings"});
  }
  for (absl::string_view value : {"1", "null", "{\"x\":\"y\"}", "[\"a\"]", "true"}) {
    ExpectRefused(RawSafetensors(absl::StrCat(R"({"__metadata__":{"format":"pt","k":)", value,
                                              R"(},"w":)", empty, "}"),
                                 ""),
                  StatusCode::kInvalidArgument, {"value of \"k\" must be a string"});
  }
  ExpectRefused(RawSafetensors(R"({"__metadata__":{"k":"a","k":"b"}})", ""),
                StatusCode::kInvalidArgument, {"'__metadata__' / 'k'"});
}

TEST_F(Validation, PaddedHandMadeFileIsAccepted) {
  // Whitespace after the object (the writer's padding) is allowed; so is an empty header object.
  ExpectAccepted(
      RawSafetensors(absl::StrCat(R"({"w":)", Entry("U8", "[2]", "[0,2]"), "}    "), "ab"));
  ExpectAccepted(RawSafetensors("{}", ""));
  ExpectAccepted(RawSafetensors(R"({"__metadata__":{}})", ""));
}

}  // namespace
}  // namespace q38
