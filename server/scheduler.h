// Admission and the request lifecycle: a bounded queue in front of one running request (the
// contract's max_num_seqs = 1), each request sent to every rank, rank 0's tokens relayed to the
// waiting handler. While a benchmark holds the scheduler only its own requests run; ordinary ones
// wait in the queue. Written so batching can replace RunOne later without touching the API.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
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
  bool benchmark = false;  // runs only while a benchmark holds the scheduler, never counts as queued

  std::mutex mu;
  std::condition_variable cv;
  std::deque<int32_t> tokens;      // produced, not yet taken by the handler
  bool done = false;
  std::string finish_reason;       // eos, stop, length, cancelled, error
  absl::Status error;              // set when finish_reason is error
  std::string cancel_by;           // client, deadline, drain, stop (a stop string matched)
  bool cancel_requested = false;
  Clock::time_point received, scheduled, first_token, last_token, finished;
  int32_t generated = 0;
};

class Scheduler {
 public:
  Scheduler(Supervisor& supervisor, Metrics& metrics, size_t queue_size);
  ~Scheduler();

  // RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when draining or the group is down.
  // Benchmark jobs are refused (FAILED_PRECONDITION) unless a benchmark holds the scheduler.
  absl::Status Submit(std::shared_ptr<Job> job);
  // From now until EndBenchmark only benchmark jobs run (after the one running now, if any);
  // RESOURCE_EXHAUSTED while another benchmark holds it, UNAVAILABLE when draining or down.
  absl::Status BeginBenchmark();
  void EndBenchmark();
  // Stops the job at the next step (running) or drops it from the queue (waiting).
  void Cancel(const std::shared_ptr<Job>& job, const std::string& by);
  // A worker died: the running job fails with UNAVAILABLE now, not when its collectives time out.
  void FailRunning(const std::string& why);
  // Stop admitting; true when the queue and the running request emptied before the deadline.
  bool Drain(Clock::time_point deadline);
  // Cancels everything still queued or running (after a drain deadline).
  void CancelAll(const std::string& by);
  void SetAvailable(bool up);
  int waiting() const;
  int running() const;
  void Stop();

 private:
  void Loop();
  void RunOne(const std::shared_ptr<Job>& job);
  static void Finish(Job& job, const std::string& reason, absl::Status error = absl::OkStatus());

  Supervisor& supervisor_;
  Metrics& metrics_;
  const size_t queue_size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<Job>> benchmark_queue_;
  bool benchmarking_ = false;
  std::shared_ptr<Job> running_;
  bool draining_ = false, stopping_ = false, available_ = false;
  std::thread thread_;
};

}  // namespace q38
