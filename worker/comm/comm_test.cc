// Collectives on every implementation: the sums, gathers and broadcasts the model relies on, over
// threads, over Gloo's TCP transport and over shared memory between real processes, and the errors
// a missing, dead or stopped peer must produce instead of a hang.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
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

// Values whose sum depends on the order of addition, with sizes that span several slot rounds.
std::vector<float> Awkward(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 3 == 0 ? 1e7f : 1.0f) * std::sin(0.37f * i + rank) / (rank + 1);
  return v;
}

// What each shm rank checks beyond Exercise: messages larger than a slot, sums bitwise equal to
// the in-process group's, and many collectives back to back (both banks, wrap of nothing).
std::string ExerciseLarge(Communicator& c, const std::vector<float>& expected_sum) {
  std::vector<float> v = Awkward(c.rank(), expected_sum.size());
  Tensor vt = View(v);
  if (!c.AllReduceSum(vt).ok()) return "large all-reduce failed";
  if (std::memcmp(v.data(), expected_sum.data(), v.size() * sizeof(float)) != 0) return "large all-reduce differs from in-process";
  std::vector<float> mine = Awkward(c.rank(), 1000), all(1000 * c.size());
  Tensor all_t = View(all);
  if (!c.AllGather(View(mine), all_t).ok()) return "large all-gather failed";
  for (int r = 0; r < c.size(); ++r) {
    if (std::vector<float>(all.begin() + r * 1000, all.begin() + (r + 1) * 1000) != Awkward(r, 1000)) return "wrong large all-gather";
  }
  std::vector<char> blob(5000, c.rank() == c.size() - 1 ? 'x' : '.');
  if (!c.Broadcast(blob.data(), blob.size(), c.size() - 1).ok() || blob != std::vector<char>(5000, 'x')) return "wrong large broadcast";
  for (int i = 0; i < 300; ++i) {
    int32_t step = c.rank() == 0 ? i : -1;
    if (!c.Broadcast(&step, sizeof(step), 0).ok() || step != i) return "wrong broadcast in a run";
  }
  return "";
}

std::vector<float> InProcessSum(int world, size_t n) {
  auto group = MakeInProcessGroup(world);
  std::vector<std::vector<float>> v(world);
  OnThreads(world, [&](int r) {
    v[r] = Awkward(r, n);
    Tensor t = View(v[r]);
    (void)group[r]->AllReduceSum(t);
  });
  return v[0];
}

constexpr size_t kSmallSlot = 1024;  // 256 floats: the large cases take several rounds

TEST(Comm, SharedMemoryBetweenThreads) {
  for (int n : {1, 2, 4}) {
    const std::string dir = FreshDir();
    const std::vector<float> sum = InProcessSum(n, 3001);
    std::vector<std::string> errors(n);
    OnThreads(n, [&](int r) {
      auto c = ConnectSharedMemory({.rank = r, .size = n, .store_dir = dir, .prefix = "threads", .slot_bytes = kSmallSlot});
      errors[r] = c.ok() ? Exercise(**c) + ExerciseLarge(**c, sum) : std::string(c.status().message());
    });
    for (const auto& e : errors) EXPECT_EQ(e, "") << "world " << n;
    // The segment's file is gone once the group is whole.
    EXPECT_TRUE(std::filesystem::is_empty(dir));
    std::filesystem::remove_all(dir);
  }
}

TEST(Comm, SharedMemoryBetweenProcesses) {
  const std::string dir = FreshDir();
  const std::vector<float> sum = InProcessSum(4, 3001);
  auto codes = OnProcesses(4, [&](int r) {
    auto c = ConnectSharedMemory({.rank = r, .size = 4, .store_dir = dir, .prefix = "procs", .slot_bytes = kSmallSlot});
    if (!c.ok()) return 3;
    return Exercise(**c).empty() && ExerciseLarge(**c, sum).empty() ? 0 : 1;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
  std::filesystem::remove_all(dir);
}

TEST(Comm, SharedMemoryRendezvousWithAMissingPeerTimesOut) {
  const std::string dir = FreshDir();
  auto lone = ConnectSharedMemory({.rank = 0, .size = 2, .store_dir = dir, .prefix = "missing", .timeout_ms = 300});
  ASSERT_FALSE(lone.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(lone.status())) << lone.status();
  auto no_root = ConnectSharedMemory({.rank = 1, .size = 2, .store_dir = dir, .prefix = "missing", .timeout_ms = 300});
  ASSERT_FALSE(no_root.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(no_root.status())) << no_root.status();
  std::filesystem::remove_all(dir);
}

TEST(Comm, SharedMemoryRefusesARankOnAnotherHost) {
  const std::string dir = FreshDir();
  std::vector<absl::Status> status(2);
  OnThreads(2, [&](int r) {
    status[r] = ConnectSharedMemory({.rank = r, .size = 2, .store_dir = dir, .prefix = "remote", .timeout_ms = 1000,
                                     .host = r == 0 ? "host-a" : "host-b"})
                    .status();
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(status[1])) << status[1];
  EXPECT_NE(status[1].message().find("host-a"), std::string::npos) << status[1];
  EXPECT_TRUE(absl::IsDeadlineExceeded(status[0])) << status[0];  // left alone
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // rank 0 took its segment away
  std::filesystem::remove_all(dir);
}

// A rank that gives up before the group is whole takes its count back: a late rank does not
// complete a group with it, it waits for a real one and times out.
TEST(Comm, SharedMemoryRankThatGaveUpIsNotCounted) {
  const std::string dir = FreshDir();
  std::vector<absl::Status> status(3);
  std::thread early([&] {
    status[0] = ConnectSharedMemory({.rank = 0, .size = 3, .store_dir = dir, .prefix = "late", .timeout_ms = 1500}).status();
  });
  status[1] = ConnectSharedMemory({.rank = 1, .size = 3, .store_dir = dir, .prefix = "late", .timeout_ms = 300}).status();
  status[2] = ConnectSharedMemory({.rank = 2, .size = 3, .store_dir = dir, .prefix = "late", .timeout_ms = 500}).status();
  early.join();
  for (const auto& s : status) EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  std::filesystem::remove_all(dir);
}

// Rank 1 dies (or stops) once the group is whole; rank 0's collective must fail promptly with the
// cause, not hang, and later collectives must fail too rather than pair up with stale slots.
int DeadOrStoppedPeer(const std::string& dir, int r, bool stop, int timeout_ms) {
  const std::string connected = dir + "/rank0-connected";
  auto c = ConnectSharedMemory({.rank = r, .size = 2, .store_dir = dir, .prefix = "dead", .timeout_ms = timeout_ms});
  if (!c.ok()) return 3;
  if (r == 1) {
    for (int i = 0; i < 1000 && !std::filesystem::exists(connected); ++i) usleep(10'000);
    if (stop) raise(SIGSTOP);
    return 0;
  }
  std::ofstream(connected) << "1";
  std::vector<float> v(1000, 1.0f);
  Tensor vt = View(v);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*c)->AllReduceSum(vt);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s.ok()) return 1;
  if (stop ? !absl::IsDeadlineExceeded(s) : !absl::IsUnavailable(s)) return 2;
  if (!stop && waited > 2.0) return 4;  // a dead peer is seen within a wait slice, not at the timeout
  return (*c)->AllReduceSum(vt).ok() ? 5 : 0;
}

TEST(Comm, SharedMemoryCollectiveWithADeadPeerFails) {
  const std::string dir = FreshDir();
  auto codes = OnProcesses(2, [&](int r) { return DeadOrStoppedPeer(dir, r, /*stop=*/false, 20000); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  std::filesystem::remove_all(dir);
}

TEST(Comm, SharedMemoryCollectiveWithAStoppedPeerTimesOut) {
  const std::string dir = FreshDir();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(DeadOrStoppedPeer(dir, r, /*stop=*/true, 500));
    pids.push_back(pid);
  }
  int status = 0;
  waitpid(pids[0], &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  kill(pids[1], SIGKILL);
  waitpid(pids[1], &status, 0);
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

TEST(Comm, SharedMemoryRejectsABadRankOrSlot) {
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectSharedMemory({.rank = 2, .size = 2, .store_dir = "/tmp"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectSharedMemory({.rank = 0, .size = 1, .store_dir = "/tmp", .slot_bytes = 100}).status()));
}

}  // namespace
}  // namespace q38
