#include "common/mapped_objects.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace q38 {
namespace {

TEST(MappedSharedObjects, ListsTheLibrariesOfThisProcessWithTheirHashes) {
  absl::StatusOr<std::vector<MappedObject>> objects = MappedSharedObjects();
  ASSERT_TRUE(objects.ok()) << objects.status();
  bool libc = false, crypto = false;
  for (const MappedObject& o : *objects) {
    const std::string name = std::filesystem::path(o.path).filename();
    libc |= name.starts_with("libc.so") || name.starts_with("libc-");
    crypto |= name.starts_with("libcrypto.so");  // Sha256 links OpenSSL
    EXPECT_NE(o.path, std::filesystem::canonical("/proc/self/exe").string()) << "the executable is not a library";
    EXPECT_EQ(o.sha256, *Sha256File(o.path));
  }
  EXPECT_TRUE(libc);
  EXPECT_TRUE(crypto);
  EXPECT_TRUE(std::is_sorted(objects->begin(), objects->end(),
                             [](const MappedObject& a, const MappedObject& b) { return a.path < b.path; }));
}

TEST(MappedSharedObjects, SkipsNonElfDeletedAndAnonymousMappings) {
  const std::string dir = ::testing::TempDir();
  const std::string data = dir + "/mapped_data.bin";
  std::ofstream(data) << "not an ELF file";
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  const std::string maps = dir + "/maps.txt";
  std::ofstream(maps) << "7f00-7f01 r--p 00000000 08:01 1 " << data << "\n"
                      << "7f01-7f02 r-xp 00000000 08:01 2 " << self << "\n"
                      << "7f02-7f03 rw-p 00000000 00:00 0 \n"
                      << "7f03-7f04 rw-p 00000000 00:00 0 [heap]\n"
                      << "7f04-7f05 r--p 00000000 08:01 3 /tmp/gone.so (deleted)\n";
  absl::StatusOr<std::vector<MappedObject>> objects = MappedSharedObjects(maps);
  ASSERT_TRUE(objects.ok()) << objects.status();
  EXPECT_TRUE(objects->empty());
  EXPECT_EQ(MappedSharedObjects(dir + "/no-such-maps").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace q38
