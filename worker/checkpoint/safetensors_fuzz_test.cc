// Randomized corruption of a valid file's length prefix and header: SafetensorsFile::Open must
// return OK or a clean InvalidArgument/DataLoss naming the file, never crash or read out of bounds.
// Fixed seed, so every run sees the same inputs. Worth running under -fsanitize=address,undefined.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/checkpoint/safetensors_writer.h"
#include "worker/checkpoint/test_files.h"

namespace q38 {
namespace {

using testing_files::ReadFile;
using testing_files::ScratchDir;
using testing_files::WriteFile;

constexpr int kIterations = 5000;

// Characters that steer the JSON parser and validator into their interesting states.
using std::string_view_literals::operator""sv;
constexpr std::string_view kInteresting = "{}[]\",:0123456789-.eE \\uU_ab\x00\xff\xc3"sv;

uint64_t ReadLength(const std::string& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && i < static_cast<int>(f.size()); --i) {
    n = (n << 8) | static_cast<uint8_t>(f[i]);
  }
  return n;
}

void WriteLength(std::string& f, uint64_t n) {
  for (int i = 0; i < 8 && i < static_cast<int>(f.size()); ++i) {
    f[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  }
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  char RandomByte() {
    return Below(2) ? kInteresting[Below(kInteresting.size())] : static_cast<char>(rng_());
  }

  // Applies one random corruption to the prefix or the header of `f`.
  void Mutate(std::string& f) {
    const uint64_t header_end = std::min<uint64_t>(8 + ReadLength(f), f.size());
    const bool keep_length = Below(2);  // re-sync the prefix after an insert or delete
    switch (Below(8)) {
      case 0:  // flip one bit in the prefix or the header
        if (header_end > 0) f[Below(header_end)] ^= static_cast<char>(1 << Below(8));
        break;
      case 1:  // overwrite a header byte
        if (header_end > 8) f[8 + Below(header_end - 8)] = RandomByte();
        break;
      case 2: {  // insert a byte into the header
        if (header_end < 8) break;
        f.insert(f.begin() + static_cast<std::ptrdiff_t>(8 + Below(header_end - 8 + 1)),
                 RandomByte());
        if (keep_length) WriteLength(f, ReadLength(f) + 1);
        break;
      }
      case 3:  // delete a header byte
        if (header_end > 8) {
          f.erase(8 + Below(header_end - 8), 1);
          if (keep_length) WriteLength(f, ReadLength(f) - 1);
        }
        break;
      case 4:  // truncate anywhere
        f.resize(Below(f.size() + 1));
        break;
      case 5:  // a nearby header length
        WriteLength(f, ReadLength(f) + Below(33) - 16);
        break;
      case 6:  // an arbitrary header length, sometimes huge
        WriteLength(f, Below(2) ? rng_() : Below(f.size() + 64));
        break;
      case 7:  // change one digit: the JSON stays valid, shapes and offsets go wrong
        for (int tries = 0; tries < 64 && header_end > 8; ++tries) {
          const uint64_t i = 8 + Below(header_end - 8);
          if (f[i] >= '0' && f[i] <= '9') {
            f[i] = static_cast<char>('0' + Below(10));
            break;
          }
        }
        break;
    }
  }

 private:
  std::mt19937_64 rng_;
};

std::string ValidFile(const ScratchDir& dir) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.Add("model.embed_tokens.weight", DType::kBF16, {4, 3}, std::vector<uint8_t>(24, 0x3F));
  w.Add("model.layers.0.dt_bias", DType::kF32, {6}, std::vector<uint8_t>(24, 0x41));
  w.Add("model.layers.0.scale", DType::kF8E4M3, {2, 8}, std::vector<uint8_t>(16, 0x38));
  w.Add("model.layers.1.ple.offsets", DType::kI64, {2}, std::vector<uint8_t>(16, 0x01));
  w.Add("model.layers.1.empty", DType::kF16, {0, 4}, {});
  w.Add("model.ids", DType::kI32, {3}, std::vector<uint8_t>(12, 0x7F));
  w.Add("model.packed", DType::kU8, {5}, {1, 2, 3, 4, 5});
  const std::string path = dir.File("valid.safetensors");
  EXPECT_TRUE(w.Write(path).ok());
  return ReadFile(path);
}

TEST(SafetensorsFuzz, CorruptedHeadersNeverCrash) {
  ScratchDir dir;
  const std::string valid = ValidFile(dir);
  ASSERT_FALSE(valid.empty());
  Mutator m(0x5AFE7E4502ull);
  const std::string path = dir.File("fuzz.safetensors");
  int accepted = 0;
  int refused = 0;
  for (int iter = 0; iter < kIterations; ++iter) {
    std::string f = valid;
    const uint64_t rounds = 1 + m.Below(4);
    for (uint64_t r = 0; r < rounds; ++r) m.Mutate(f);
    WriteFile(path, f);

    auto file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      ++refused;
      const absl::StatusCode code = file.status().code();
      EXPECT_TRUE(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss)
          << "iteration " << iter << ": " << file.status();
      EXPECT_NE(file.status().message().find(path), std::string_view::npos)
          << "iteration " << iter << ": " << file.status();
      continue;
    }
    ++accepted;
    // Accepted: every view lies inside the data section, which the tensors tile exactly.
    const SafetensorsFile& sf = **file;
    const uint8_t* data_begin =
        reinterpret_cast<const uint8_t*>(sf.header().data() + sf.header().size());
    const uint64_t data_size = sf.file_size() - 8 - sf.header().size();
    uint64_t covered = 0;
    uint64_t checksum = 0;
    for (const TensorView& t : sf.tensors()) {
      ASSERT_GE(t.data, data_begin) << "iteration " << iter;
      ASSERT_LE(t.data + t.nbytes, data_begin + data_size) << "iteration " << iter;
      EXPECT_EQ(static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype), t.nbytes);
      EXPECT_EQ(sf.Find(t.name), &t);
      for (size_t i = 0; i < t.nbytes; ++i) checksum += t.data[i];  // touch every byte
      covered += t.nbytes;
    }
    EXPECT_EQ(covered, data_size) << "iteration " << iter;
    (void)checksum;
  }
  // Both outcomes must occur, or the mutations are not exercising the validator.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, kIterations / 2);
  std::printf("[fuzz] %d iterations: %d accepted, %d refused\n", kIterations, accepted, refused);
}

}  // namespace
}  // namespace q38
