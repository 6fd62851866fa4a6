// Admission and the request lifecycle: a bounded queue in front of one running request (the
// contract's max_num_seqs = 1), each request sent to every rank, rank 0's tokens relayed to the
// waiting handler. While a benchmark holds the scheduler only its own requests run; ordinary ones
// wait in the queue. Written so batching can replace RunOne later without touching the API.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics.h"
#include "server/supervisor.h"

namespace q38 {

using Clock = std::chrono::steady_clock;

// One admitted request and the channel between its handler and the scheduler.
struct Job {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  worker::v1::Sampling sampling;
  int32_t max_tokens = 0;
  std::set<int32_t> stop_ids, eos_ids;
  std::optional<int32_t> logprobs_asked;  // the alternatives asked for (GenerateRequest.logprobs)
  bool benchmark = false;  // runs only while a benchmark holds the scheduler, never counts as queued

  std::mutex mu;
  std::condition_variable cv;
  std::deque<int32_t> tokens;      // produced, not yet taken by the handler
  std::deque<v1::TokenLogprob> logprobs;  // theirs, when asked
  bool done = false;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;  // EOS, STOP, LENGTH, CANCELLED, ERROR
  absl::Status error;                                              // set when finish_reason is ERROR
  worker::v1::CancelReason cancel_by = worker::v1::CANCEL_REASON_UNSPECIFIED;
  bool cancel_requested = false;
  Clock::time_point received, scheduled, first_token, last_token, finished;
  int32_t generated = 0;
};

struct SchedulerOptions {
  size_t queue_size = 16;
  // A rank whose progress counter stands still this long while a request runs is stuck.
  std::chrono::milliseconds step_timeout{60000};
  // The group failed while running a request (a rank stuck, unreachable or failing): called with
  // what happened and the supervisor's generation of the group. The scheduler has paused itself;
  // whoever restarts the group resumes it.
  std::function<void(const std::string& why, int generation)> on_group_failure;
};

class Scheduler;

// Holds the scheduler for a benchmark from BeginBenchmark until it goes out of scope, on every path.
class BenchmarkHold {
 public:
  explicit BenchmarkHold(Scheduler* s) : s_(s) {}
  BenchmarkHold(BenchmarkHold&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  BenchmarkHold& operator=(BenchmarkHold&&) = delete;
  ~BenchmarkHold();

 private:
  Scheduler* s_;
};

class Scheduler {
 public:
  Scheduler(Supervisor& supervisor, Metrics& metrics, SchedulerOptions options);
  ~Scheduler();

  // RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when draining or the group is down.
  // While the group restarts (paused) requests still queue and run once it is back. Benchmark
  // jobs are refused (FAILED_PRECONDITION) unless a benchmark holds the scheduler.
  absl::Status Submit(std::shared_ptr<Job> job);
  // Until the hold is dropped only benchmark jobs run (after the one running now, if any);
  // RESOURCE_EXHAUSTED while another benchmark holds it, UNAVAILABLE when draining or down.
  absl::StatusOr<BenchmarkHold> BeginBenchmark();
  // Stops the job at the next step or prefill block (running; the cancel is sent again until the
  // job ends, so a stalled rank gets it when it resumes) or drops it from the queue (waiting).
  void Cancel(const std::shared_ptr<Job>& job, worker::v1::CancelReason by);
  // A worker died: the running job fails with UNAVAILABLE now, not when its collectives time out.
  void FailRunning(const std::string& why);
  // While paused no job starts; queued jobs wait (the group is restarting).
  void Pause();
  void Resume();
  // Fails every queued job with `error` (the group is gone for good).
  void FailQueued(const absl::Status& error);
  // Stop admitting; true when the queue and the running request emptied before the deadline.
  bool Drain(Clock::time_point deadline);
  bool draining() const;
  // Cancels everything still queued or running (after a drain deadline).
  void CancelAll(worker::v1::CancelReason by);
  void SetAvailable(bool up);
  int waiting() const;
  int running() const;
  void Stop();

 private:
  friend class BenchmarkHold;
  void EndBenchmark();
  void Loop();
  void RunOne(const std::shared_ptr<Job>& job);
  // Rank 0 is asked to stop `job` (one try, bounded by a short deadline).
  void SendCancel(Job& job);
  // RunOne's failure path: fails the job, pauses admission to the group and reports the failure.
  void GroupFailed(Job& job, const std::string& client_message, const std::string& why, int generation);
  static void Finish(Job& job, v1::FinishReason reason, absl::Status error = absl::OkStatus());

  Supervisor& supervisor_;
  Metrics& metrics_;
  const SchedulerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<Job>> benchmark_queue_;
  bool benchmarking_ = false;
  std::shared_ptr<Job> running_;
  bool draining_ = false, stopping_ = false, available_ = false, paused_ = false;
  std::thread thread_;
};

}  // namespace q38
