// The host-shared table: made once and mapped by another process with the same bytes, a maker
// that died replaced, and the notice gone with the maker's table.
#include "worker/model/host_shared_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace q38 {
namespace {

void Fill(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
}

std::string Key(const std::string& name) { return "test-" + name + "-" + std::to_string(getpid()); }

std::string Notice(const std::string& key, size_t bytes) {
  const std::string dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
  return dir + "/q38-" + key + "-" + std::to_string(bytes);
}

TEST(HostSharedTable, AnotherProcessMapsTheSameBytesWithoutFillingThem) {
  const size_t n = 1 << 20;
  const std::string key = Key("share");
  int fills = 0;
  auto made = MapHostSharedTable(key, n, [&](uint8_t* p) { ++fills, Fill(p, n); });
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->made_here);
  EXPECT_EQ(fills, 1);
  const pid_t child = fork();
  if (child == 0) {
    bool filled = false;
    auto mapped = MapHostSharedTable(key, n, [&](uint8_t*) { filled = true; }, 5000);
    if (!mapped.ok() || mapped->made_here || filled) _exit(2);
    for (size_t i = 0; i < n; ++i) {
      if (mapped->data.get()[i] != static_cast<uint8_t>(i * 7 + 3)) _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(std::filesystem::exists(Notice(key, n) + ".table"));
  made->data.reset();
  EXPECT_FALSE(std::filesystem::exists(Notice(key, n) + ".table"));
  EXPECT_FALSE(std::filesystem::exists(Notice(key, n) + ".claim"));
}

TEST(HostSharedTable, AMakerThatDiedIsReplaced) {
  const size_t n = 4096;
  const std::string key = Key("stale");
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  // What a maker killed after publishing leaves behind.
  std::ofstream(Notice(key, n) + ".claim") << dead;
  std::ofstream(Notice(key, n) + ".table") << dead << " 5\n";
  auto made = MapHostSharedTable(key, n, [&](uint8_t* p) { Fill(p, n); }, 5000);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->made_here);
  EXPECT_EQ(made->data.get()[10], static_cast<uint8_t>(73));
}

TEST(HostSharedTable, AMakerStillFillingIsWaitedForThenTimesOut) {
  const size_t n = 4096;
  const std::string key = Key("busy");
  std::ofstream(Notice(key, n) + ".claim") << getppid();  // a live process that will never publish
  auto got = MapHostSharedTable(key, n, [&](uint8_t* p) { Fill(p, n); }, 300);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  std::filesystem::remove(Notice(key, n) + ".claim");
}

}  // namespace
}  // namespace q38
