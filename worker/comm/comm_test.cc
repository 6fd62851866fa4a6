// Collectives on every implementation: the sums, gathers and broadcasts the model relies on, over
// threads and over Gloo's TCP transport between real processes, and the errors a missing or dead
// peer must produce instead of a hang.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <thread>

#include <gtest/gtest.h>

#include "worker/comm/communicator.h"

namespace q38 {
namespace {

std::string FreshDir() {
  std::string dir = ::testing::TempDir() + "/comm_test_XXXXXX";
  return mkdtemp(dir.data());
}

Tensor View(std::vector<float>& v) { return Tensor{v.data(), DType::kF32, {static_cast<int64_t>(v.size())}}; }

// The checks each rank runs; returns an empty string when all hold.
std::string Exercise(Communicator& c) {
  const int r = c.rank(), n = c.size();
  std::vector<float> v = {1.0f + r, 10.0f * r, -0.5f};
  Tensor vt = View(v);
  if (!c.AllReduceSum(vt).ok()) return "all-reduce failed";
  const float sum_r = n * (n - 1) / 2.0f;
  if (v != std::vector<float>{n + sum_r, 10 * sum_r, -0.5f * n}) return "wrong all-reduce";
  std::vector<float> mine = {static_cast<float>(r), static_cast<float>(r * r)}, all(2 * n);
  Tensor all_t = View(all);
  if (!c.AllGather(View(mine), all_t).ok()) return "all-gather failed";
  for (int k = 0; k < n; ++k) {
    if (all[2 * k] != k || all[2 * k + 1] != k * k) return "wrong all-gather";
  }
  int32_t token = r == n - 1 ? 4242 : -1;
  if (!c.Broadcast(&token, sizeof(token), n - 1).ok()) return "broadcast failed";
  if (token != 4242) return "wrong broadcast";
  return "";
}

void OnThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(fn, r);
  for (auto& t : ts) t.join();
}

TEST(Comm, SoloIsTheIdentity) { EXPECT_EQ(Exercise(*MakeSoloCommunicator()), ""); }

TEST(Comm, InProcessGroups) {
  for (int n : {1, 2, 4}) {
    auto group = MakeInProcessGroup(n);
    std::vector<std::string> errors(n);
    OnThreads(n, [&](int r) { errors[r] = Exercise(*group[r]); });
    for (const auto& e : errors) EXPECT_EQ(e, "") << "world " << n;
  }
}

TEST(Comm, GlooOverTcpBetweenThreads) {
  const std::string dir = FreshDir();
  std::vector<std::string> errors(4);
  OnThreads(4, [&](int r) {
    auto c = ConnectGloo({.rank = r, .size = 4, .store_dir = dir, .prefix = "threads"});
    errors[r] = c.ok() ? Exercise(**c) : std::string(c.status().message());
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  std::filesystem::remove_all(dir);
}

// Forks `n` processes running `fn(rank)`; returns their exit codes.
std::vector<int> OnProcesses(int n, const std::function<int(int)>& fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(fn(r));
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

TEST(Comm, GlooBetweenProcesses) {
  const std::string dir = FreshDir();
  auto codes = OnProcesses(2, [&](int r) {
    auto c = ConnectGloo({.rank = r, .size = 2, .store_dir = dir, .prefix = "procs"});
    return c.ok() && Exercise(**c).empty() ? 0 : 1;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  std::filesystem::remove_all(dir);
}

TEST(Comm, GlooRendezvousWithAMissingPeerTimesOut) {
  const std::string dir = FreshDir();
  auto c = ConnectGloo({.rank = 0, .size = 2, .store_dir = dir, .prefix = "missing", .timeout_ms = 500});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(c.status()) || absl::IsUnavailable(c.status())) << c.status();
  std::filesystem::remove_all(dir);
}

TEST(Comm, GlooCollectiveWithADeadPeerFails) {
  const std::string dir = FreshDir();
  // Rank 1 exits once rank 0 holds a connected group; rank 0's all-reduce must fail, not hang.
  // (Exiting before rank 0's own connect finishes would fail the connect instead.)
  const std::string connected = dir + "/rank0-connected";
  auto codes = OnProcesses(2, [&](int r) {
    auto c = ConnectGloo({.rank = r, .size = 2, .store_dir = dir, .prefix = "dead", .timeout_ms = 10000});
    if (!c.ok()) return 3;
    if (r == 1) {
      for (int i = 0; i < 1000 && !std::filesystem::exists(connected); ++i) usleep(10'000);
      return 0;
    }
    std::ofstream(connected) << "1";
    std::vector<float> v(1000, 1.0f);
    Tensor vt = View(v);
    absl::Status s = (*c)->AllReduceSum(vt);
    return s.ok() ? 1 : (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ? 0 : 2);
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  std::filesystem::remove_all(dir);
}

TEST(Comm, CpuGroupsRefuseNonF32Tensors) {
  auto group = MakeInProcessGroup(1);
  std::vector<uint16_t> halves(4);
  Tensor t{halves.data(), DType::kF16, {4}};
  EXPECT_TRUE(absl::IsInvalidArgument(group[0]->AllReduceSum(t)));
}

TEST(Comm, GlooRejectsABadRank) {
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectGloo({.rank = 2, .size = 2, .store_dir = "/tmp"}).status()));
}

}  // namespace
}  // namespace q38
