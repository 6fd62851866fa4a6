// The Supervisor against fake ranks (server/testing/fake_worker_main.cc): startup to ready, each way
// a start fails and what the error names, deaths reported with rank and generation, and a stop
// that leaves no process behind.
#include "server/supervisor.h"

#include <signal.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "server/testing/fake_group.h"

namespace q38 {
namespace {

using fake::FakeGroup;

// Reaped (not merely dead: a zombie still answers kill(pid, 0)).
bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class SupervisorStartTest : public ::testing::TestWithParam<int> {};

TEST_P(SupervisorStartTest, EveryRankReachesReady) {
  const int tp = GetParam();
  FakeGroup group(tp, "loading_ms=200");
  Supervisor& s = group.supervisor();
  ASSERT_EQ(s.Start(absl::Seconds(10)), absl::OkStatus());
  EXPECT_EQ(s.generation(), 1);
  ASSERT_EQ(s.infos().size(), static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) {
    const worker::v1::WorkerInfo& info = s.infos()[r];
    EXPECT_EQ(info.phase(), "ready");
    EXPECT_EQ(info.rank(), r);
    EXPECT_EQ(info.world(), tp);
    EXPECT_EQ(info.manifest().pid(), s.pids()[r]);  // the process it spawned answers on its socket
    EXPECT_TRUE(kill(s.pids()[r], 0) == 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, SupervisorStartTest, ::testing::Values(1, 2));

TEST(SupervisorTest, RefusedCheckpointIsFailedPrecondition) {
  FakeGroup group(2, "refuse=1");
  const absl::Status s = group.supervisor().Start(absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 refused the checkpoint")) << s;
}

TEST(SupervisorTest, RankDyingAtStartupIsUnavailableNamingRankAndExit) {
  {
    FakeGroup group(2, "exit_at_start=1:3");
    const absl::Status s = group.supervisor().Start(absl::Seconds(10));
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 exited with code 3 during startup")) << s;
  }
  FakeGroup group(2, "exit_at_start=0:abort");
  const absl::Status s = group.supervisor().Start(absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 0 killed by signal 6")) << s;
}

TEST(SupervisorTest, RankStuckLoadingIsDeadlineExceededNamingThePhase) {
  FakeGroup group(2, "stuck_loading=1");
  Supervisor& s = group.supervisor();
  const absl::Status status = s.Start(absl::Seconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 1 stuck in phase 'loading'")) << status;
  // Both ranks still run; KillAll (what the server does after a failed start) reaps them.
  const std::vector<pid_t> pids = s.pids();
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) EXPECT_NE(p, 0);
  s.KillAll();
  for (pid_t p : pids) EXPECT_TRUE(Gone(p)) << p;
}

TEST(SupervisorTest, LaterDeathIsReportedWithRankHowAndGeneration) {
  struct Death {
    int rank, generation;
    std::string how;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Death> deaths;
  FakeGroup group(2, "", [&](int rank, const std::string& how, int generation) {
    std::lock_guard<std::mutex> l(mu);
    deaths.push_back({rank, generation, how});
    cv.notify_all();
  });
  Supervisor& s = group.supervisor();
  ASSERT_EQ(s.Start(absl::Seconds(10)), absl::OkStatus());
  // A restart: the first group's ranks are killed on purpose, which is no death to report.
  ASSERT_EQ(s.Start(absl::Seconds(10)), absl::OkStatus());
  ASSERT_EQ(s.generation(), 2);
  ASSERT_EQ(kill(s.pids()[1], SIGKILL), 0);
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return !deaths.empty(); }));
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].rank, 1);
  EXPECT_EQ(deaths[0].generation, 2);
  EXPECT_TRUE(absl::StrContains(deaths[0].how, "killed by signal 9")) << deaths[0].how;
  EXPECT_EQ(s.pids()[1], 0);
  EXPECT_NE(s.pids()[0], 0);
}

TEST(SupervisorTest, StopShutsEveryRankDownAndReapsIt) {
  int deaths = 0;
  FakeGroup group(2, "", [&](int, const std::string&, int) { ++deaths; });
  Supervisor& s = group.supervisor();
  ASSERT_EQ(s.Start(absl::Seconds(10)), absl::OkStatus());
  const std::vector<pid_t> pids = s.pids();
  const absl::Time start = absl::Now();
  s.Stop(absl::Seconds(20));
  // Well inside the grace: the ranks left on Shutdown rather than waiting for the SIGKILL.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(group.Recorded(r, "shutdown")) << r;
    EXPECT_TRUE(Gone(pids[r])) << pids[r];
    EXPECT_EQ(s.pids()[r], 0);
  }
  EXPECT_EQ(deaths, 0);  // a stop is no death
}

}  // namespace
}  // namespace q38
