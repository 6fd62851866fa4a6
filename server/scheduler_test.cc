// The Scheduler over a real Supervisor and fake ranks (server/testing/fake_worker_main.cc): rank 0's
// tokens relayed in order and the finish reasons, admission (a full queue, a drain, a benchmark
// hold), cancels of running and queued jobs, and a group that hangs or loses a rank mid-run.
#include "server/scheduler.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/enum_names.h"
#include "server/testing/fake_group.h"

namespace q38 {
namespace {

using fake::FakeGroup;
using fake::WaitFor;
constexpr auto kClient = worker::v1::CANCEL_REASON_CLIENT;

std::shared_ptr<Job> MakeJob(std::vector<int32_t> prompt, int32_t max_tokens, std::set<int32_t> stop = {},
                             std::set<int32_t> eos = {}) {
  static uint64_t next_id = 1;
  auto job = std::make_shared<Job>();
  job->id = next_id++;
  job->prompt = std::move(prompt);
  job->max_tokens = max_tokens;
  job->stop_ids = std::move(stop);
  job->eos_ids = std::move(eos);
  job->received = Clock::now();
  return job;
}

bool WaitDone(Job& job, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  std::unique_lock<std::mutex> l(job.mu);
  return job.cv.wait_for(l, timeout, [&] { return job.done; });
}

// The job's state as the handler sees it; reasons by their names in proto/enum_names.h.
std::string FinishReason(Job& job) {
  std::lock_guard<std::mutex> l(job.mu);
  return FinishReasonName(job.finish_reason);
}
std::string CancelBy(Job& job) {
  std::lock_guard<std::mutex> l(job.mu);
  return CancelReasonName(job.cancel_by);
}
std::vector<int32_t> Tokens(Job& job) {
  std::lock_guard<std::mutex> l(job.mu);
  return {job.tokens.begin(), job.tokens.end()};
}
absl::Status Error(Job& job) {
  std::lock_guard<std::mutex> l(job.mu);
  return job.error;
}

std::string RunLine(const Job& job) { return absl::StrCat("run ", job.id); }
std::string EndLine(const Job& job, const std::string& reason) { return absl::StrCat("end ", job.id, " ", reason); }

class SchedulerTest : public ::testing::Test {
 protected:
  // `tp` fake ranks scripted by `behaviour`, and a scheduler over them whose group failures are
  // recorded; a rank's death fails the running job, as the server's control loop does.
  absl::Status Start(int tp, const std::string& behaviour, SchedulerOptions options = {}) {
    group_ = std::make_unique<FakeGroup>(tp, behaviour, [this](int rank, const std::string& how, int) {
      if (Scheduler* s = scheduler_ptr_.load()) s->FailRunning(absl::StrCat("rank ", rank, " ", how));
    });
    RETURN_IF_ERROR(group_->supervisor().Start(absl::Seconds(10)));
    options.on_group_failure = [this](const std::string& why, int generation) {
      std::lock_guard<std::mutex> l(mu_);
      failures_.emplace_back(why, generation);
    };
    scheduler_ = std::make_unique<Scheduler>(group_->supervisor(), metrics_, std::move(options));
    scheduler_->SetAvailable(true);
    scheduler_ptr_ = scheduler_.get();
    return absl::OkStatus();
  }

  void TearDown() override {
    scheduler_ptr_ = nullptr;
    // A run a test left going ends with its ranks, so the scheduler's thread can stop.
    if (group_) group_->supervisor().KillAll();
    scheduler_.reset();
    group_.reset();
  }

  std::vector<std::pair<std::string, int>> failures() {
    std::lock_guard<std::mutex> l(mu_);
    return failures_;
  }

  Metrics metrics_{BuildInfo{}};
  std::unique_ptr<FakeGroup> group_;
  std::unique_ptr<Scheduler> scheduler_;
  std::atomic<Scheduler*> scheduler_ptr_{nullptr};
  std::mutex mu_;
  std::vector<std::pair<std::string, int>> failures_;
};

TEST_F(SchedulerTest, RelaysRankZeroTokensInOrderToLength) {
  ASSERT_EQ(Start(2, ""), absl::OkStatus());
  auto job = MakeJob({5, 7}, 6);
  ASSERT_EQ(scheduler_->Submit(job), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*job));
  EXPECT_EQ(FinishReason(*job), "length");
  EXPECT_EQ(Error(*job), absl::OkStatus());
  EXPECT_EQ(Tokens(*job), (std::vector<int32_t>{8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(job->generated, 6);
  for (int r = 0; r < 2; ++r) {  // every rank ran it
    EXPECT_TRUE(group_->Recorded(r, RunLine(*job))) << r;
    EXPECT_TRUE(group_->Recorded(r, EndLine(*job, "length"))) << r;
  }
}

TEST_F(SchedulerTest, StopsAtEosAndStopIds) {
  ASSERT_EQ(Start(1, ""), absl::OkStatus());
  auto eos = MakeJob({7}, 20, {11}, {11});
  auto stop = MakeJob({7}, 20, {10, 20}, {20});
  ASSERT_EQ(scheduler_->Submit(eos), absl::OkStatus());
  ASSERT_EQ(scheduler_->Submit(stop), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*eos));
  ASSERT_TRUE(WaitDone(*stop));
  EXPECT_EQ(FinishReason(*eos), "eos");
  EXPECT_EQ(Tokens(*eos), (std::vector<int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(FinishReason(*stop), "stop");
  EXPECT_EQ(Tokens(*stop), (std::vector<int32_t>{8, 9, 10}));
}

TEST_F(SchedulerTest, FullQueueIsResourceExhausted) {
  SchedulerOptions options;
  options.queue_size = 1;
  ASSERT_EQ(Start(1, "token_ms=10", options), absl::OkStatus());
  auto running = MakeJob({1}, 100000), queued = MakeJob({1}, 3), refused = MakeJob({1}, 3);
  ASSERT_EQ(scheduler_->Submit(running), absl::OkStatus());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 1 && scheduler_->waiting() == 0; }));
  ASSERT_EQ(scheduler_->Submit(queued), absl::OkStatus());
  const absl::Status s = scheduler_->Submit(refused);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(scheduler_->waiting(), 1);
  scheduler_->Cancel(queued, kClient);
  scheduler_->Cancel(running, kClient);
  EXPECT_TRUE(WaitDone(*running));
}

TEST_F(SchedulerTest, CancelDropsAQueuedJob) {
  ASSERT_EQ(Start(1, "token_ms=10"), absl::OkStatus());
  auto running = MakeJob({1}, 100000), queued = MakeJob({1}, 3);
  ASSERT_EQ(scheduler_->Submit(running), absl::OkStatus());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 1; }));
  ASSERT_EQ(scheduler_->Submit(queued), absl::OkStatus());
  ASSERT_EQ(scheduler_->waiting(), 1);
  scheduler_->Cancel(queued, kClient);
  {
    std::lock_guard<std::mutex> l(queued->mu);
    EXPECT_TRUE(queued->done);  // at once: nothing ran it
  }
  EXPECT_EQ(FinishReason(*queued), "cancelled");
  EXPECT_EQ(CancelBy(*queued), "client");
  EXPECT_EQ(scheduler_->waiting(), 0);
  scheduler_->Cancel(running, kClient);
  ASSERT_TRUE(WaitDone(*running));
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 0; }));
  EXPECT_FALSE(group_->Recorded(0, RunLine(*queued)));
}

TEST_F(SchedulerTest, CancelStopsTheRunningJobOnEveryRank) {
  ASSERT_EQ(Start(2, "token_ms=10"), absl::OkStatus());
  auto job = MakeJob({1}, 100000);
  ASSERT_EQ(scheduler_->Submit(job), absl::OkStatus());
  ASSERT_TRUE(WaitFor([&] { return !Tokens(*job).empty(); }));
  scheduler_->Cancel(job, kClient);
  ASSERT_TRUE(WaitDone(*job, std::chrono::seconds(5)));
  EXPECT_EQ(FinishReason(*job), "cancelled");
  EXPECT_EQ(CancelBy(*job), "client");
  EXPECT_LT(job->generated, 100000);
  EXPECT_TRUE(group_->Recorded(0, absl::StrCat("cancel ", job->id, " client")));
  // The job is done once its ranks are: the next one runs on the same group.
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(group_->Recorded(r, EndLine(*job, "cancelled"))) << r;
  auto next = MakeJob({1}, 3);
  ASSERT_EQ(scheduler_->Submit(next), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*next));
  EXPECT_EQ(FinishReason(*next), "length");
}

TEST_F(SchedulerTest, DrainRefusesNewJobsAndLetsTheRunningOneFinish) {
  ASSERT_EQ(Start(1, "token_ms=10"), absl::OkStatus());
  auto job = MakeJob({1}, 100);
  ASSERT_EQ(scheduler_->Submit(job), absl::OkStatus());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 1; }));
  bool drained = false;
  std::thread drain([&] { drained = scheduler_->Drain(Clock::now() + std::chrono::seconds(20)); });
  ASSERT_TRUE(WaitFor([&] { return scheduler_->draining(); }));
  const absl::Status s = scheduler_->Submit(MakeJob({1}, 3));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  drain.join();
  EXPECT_TRUE(drained);
  ASSERT_TRUE(WaitDone(*job, std::chrono::milliseconds(0)));
  EXPECT_EQ(FinishReason(*job), "length");
  EXPECT_EQ(job->generated, 100);
}

TEST_F(SchedulerTest, HungRankFailsTheJobWithinTheStepTimeoutAndPauses) {
  SchedulerOptions options;
  options.step_timeout = std::chrono::milliseconds(500);
  ASSERT_EQ(Start(2, "token_ms=10,hang_after=1:3", options), absl::OkStatus());
  auto job = MakeJob({1}, 100000);
  const Clock::time_point submitted = Clock::now();
  ASSERT_EQ(scheduler_->Submit(job), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*job));
  const auto took = Clock::now() - submitted;
  EXPECT_GE(took, options.step_timeout);
  EXPECT_LT(took, options.step_timeout + std::chrono::seconds(3));
  EXPECT_EQ(FinishReason(*job), "error");
  EXPECT_TRUE(absl::IsUnavailable(Error(*job))) << Error(*job);
  EXPECT_TRUE(absl::StrContains(Error(*job).message(), "rank 1 made no progress")) << Error(*job);
  EXPECT_TRUE(group_->Recorded(1, absl::StrCat("hang ", job->id)));
  ASSERT_TRUE(WaitFor([&] { return !failures().empty(); }));
  EXPECT_TRUE(absl::StrContains(failures()[0].first, "rank 1 made no progress")) << failures()[0].first;
  EXPECT_EQ(failures()[0].second, 1);
  // Paused for the restart: a new job queues but does not start. Nothing signals a job that does
  // not start, so the test gives it a moment.
  auto next = MakeJob({1}, 3);
  ASSERT_EQ(scheduler_->Submit(next), absl::OkStatus());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(scheduler_->waiting(), 1);
  EXPECT_FALSE(group_->Recorded(0, RunLine(*next)));
  scheduler_->Cancel(next, kClient);
}

TEST_F(SchedulerTest, RankDyingMidRunFailsTheJobAtOnce) {
  ASSERT_EQ(Start(2, "token_ms=10,exit_after=1:3:abort"), absl::OkStatus());
  auto job = MakeJob({1}, 100000);
  ASSERT_EQ(scheduler_->Submit(job), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*job));
  EXPECT_EQ(FinishReason(*job), "error");
  EXPECT_TRUE(absl::IsUnavailable(Error(*job))) << Error(*job);
  // FailRunning's message, while rank 0 still runs: the job did not wait for its stream to end.
  EXPECT_TRUE(absl::StrContains(Error(*job).message(), "a worker failed during this request (rank 1 killed by signal 6"))
      << Error(*job);
  EXPECT_FALSE(group_->Recorded(0, EndLine(*job, "length")));
}

TEST_F(SchedulerTest, BenchmarkHoldKeepsOrdinaryJobsWaiting) {
  ASSERT_EQ(Start(1, ""), absl::OkStatus());
  auto stray = MakeJob({1}, 3);
  stray->benchmark = true;
  EXPECT_TRUE(absl::IsFailedPrecondition(scheduler_->Submit(stray)));  // no hold

  std::optional<BenchmarkHold> hold;
  {
    absl::StatusOr<BenchmarkHold> h = scheduler_->BeginBenchmark();
    ASSERT_TRUE(h.ok()) << h.status();
    hold.emplace(*std::move(h));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(scheduler_->BeginBenchmark().status()));
  auto ordinary = MakeJob({1}, 3), bench = MakeJob({20}, 3);
  bench->benchmark = true;
  ASSERT_EQ(scheduler_->Submit(ordinary), absl::OkStatus());
  ASSERT_EQ(scheduler_->Submit(bench), absl::OkStatus());
  ASSERT_TRUE(WaitDone(*bench));
  EXPECT_EQ(Tokens(*bench), (std::vector<int32_t>{21, 22, 23}));
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 0; }));
  // The benchmark's job ran although the ordinary one came first; that one still waits.
  EXPECT_EQ(scheduler_->waiting(), 1);
  EXPECT_FALSE(group_->Recorded(0, RunLine(*ordinary)));

  hold.reset();
  ASSERT_TRUE(WaitDone(*ordinary));
  EXPECT_EQ(FinishReason(*ordinary), "length");
  const std::vector<std::string> events = group_->Events(0);
  EXPECT_LT(std::find(events.begin(), events.end(), RunLine(*bench)), std::find(events.begin(), events.end(), RunLine(*ordinary)));
}

}  // namespace
}  // namespace q38
