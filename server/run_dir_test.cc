#include "server/run_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(RunDir, RemovedWhenDropped) {
  const std::string parent = ::testing::TempDir() + "/rundir_dropped";
  std::string path;
  {
    absl::StatusOr<RunDir> d = RunDir::Create(parent + "/q38-run-a");
    ASSERT_TRUE(d.ok()) << d.status();
    path = d->path();
    EXPECT_TRUE(std::filesystem::exists(path + "/owner"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RunDir, StaleDirectoriesOfDeadOwnersAreRemoved) {
  const std::string parent = ::testing::TempDir() + "/rundir_stale";
  std::filesystem::remove_all(parent);
  std::filesystem::create_directories(parent);
  // A child creates a run directory and dies without removing it, as a SIGKILLed coordinator would.
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<RunDir> d = RunDir::Create(parent + "/q38-run-dead");
    _exit(d.ok() ? 0 : 1);  // _exit: no destructor runs
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  absl::StatusOr<RunDir> live = RunDir::Create(parent + "/q38-run-live");
  ASSERT_TRUE(live.ok());
  std::filesystem::create_directories(parent + "/q38-run-foreign");  // no owner file: left alone
  std::filesystem::create_directories(parent + "/other");
  EXPECT_EQ(RemoveStaleRunDirs(parent), 1);
  EXPECT_FALSE(std::filesystem::exists(parent + "/q38-run-dead"));
  EXPECT_TRUE(std::filesystem::exists(parent + "/q38-run-live"));
  EXPECT_TRUE(std::filesystem::exists(parent + "/q38-run-foreign"));
}

}  // namespace
}  // namespace q38
