#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace q38 {
Scheduler::Scheduler(Supervisor& supervisor, Metrics& metrics, size_t queue_size)
    : supervisor_(supervisor), metrics_(metrics), queue_size_(queue_size), thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status Scheduler::Submit(std::shared_ptr<Job> job) {
  std::lock_guard<std::mutex> l(mu_);
  if (draining_ || stopping_) return absl::UnavailableError("server is draining; not accepting requests");
  if (!available_) return absl::UnavailableError("workers are not ready");
  if (job->benchmark) {
    if (!benchmarking_) return absl::FailedPreconditionError("no benchmark holds the scheduler");
    benchmark_queue_.push_back(std::move(job));
    cv_.notify_all();
    return absl::OkStatus();
  }
  if (queue_.size() >= queue_size_) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full (", queue_size_, " waiting)"));
  }
  queue_.push_back(std::move(job));
  metrics_.SetWaiting(static_cast<int>(queue_.size()));
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status Scheduler::BeginBenchmark() {
  std::lock_guard<std::mutex> l(mu_);
  if (draining_ || stopping_) return absl::UnavailableError("server is draining; not accepting requests");
  if (!available_) return absl::UnavailableError("workers are not ready");
  if (benchmarking_) return absl::ResourceExhaustedError("a benchmark is already running");
  benchmarking_ = true;
  return absl::OkStatus();
}

void Scheduler::EndBenchmark() {
  {
    std::lock_guard<std::mutex> l(mu_);
    benchmarking_ = false;
  }
  cv_.notify_all();
}

void Scheduler::Finish(Job& job, const std::string& reason, absl::Status error) {
  std::lock_guard<std::mutex> l(job.mu);
  if (job.done) return;
  job.done = true;
  job.finish_reason = reason;
  job.error = std::move(error);
  job.finished = Clock::now();
  job.cv.notify_all();
}

void Scheduler::Cancel(const std::shared_ptr<Job>& job, const std::string& by) {
  {
    std::lock_guard<std::mutex> l(job->mu);
    if (job->done || job->cancel_requested) return;
    job->cancel_requested = true;
    job->cancel_by = by;
  }
  bool was_running;
  {
    std::lock_guard<std::mutex> l(mu_);
    was_running = running_ == job;
    if (!was_running) {
      auto& q = job->benchmark ? benchmark_queue_ : queue_;
      if (auto it = std::find(q.begin(), q.end(), job); it != q.end()) q.erase(it);
      metrics_.SetWaiting(static_cast<int>(queue_.size()));
    }
  }
  if (!was_running) {
    Finish(*job, "cancelled");
    return;
  }
  // Rank 0 decides; it stops every rank in-band at the next step.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  worker::v1::CancelRequest req;
  req.set_request_id(job->id);
  worker::v1::CancelResponse resp;
  supervisor_.stub(0).Cancel(&ctx, req, &resp);
}

void Scheduler::FailRunning(const std::string& why) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> l(mu_);
    job = running_;
  }
  if (job) Finish(*job, "error", absl::UnavailableError(why));
}

void Scheduler::SetAvailable(bool up) {
  std::lock_guard<std::mutex> l(mu_);
  available_ = up;
}

bool Scheduler::Drain(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  draining_ = true;
  return cv_.wait_until(l, deadline, [&] { return queue_.empty() && benchmark_queue_.empty() && running_ == nullptr; });
}

void Scheduler::CancelAll(const std::string& by) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs.assign(queue_.begin(), queue_.end());
    jobs.insert(jobs.end(), benchmark_queue_.begin(), benchmark_queue_.end());
    if (running_) jobs.push_back(running_);
  }
  for (auto& j : jobs) Cancel(j, by);
}

int Scheduler::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(queue_.size());
}

int Scheduler::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_ ? 1 : 0;
}

void Scheduler::Loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      // A benchmark's requests go first; ordinary ones wait while a benchmark holds the scheduler.
      cv_.wait(l, [&] { return stopping_ || !benchmark_queue_.empty() || (!benchmarking_ && !queue_.empty()); });
      if (stopping_) return;
      auto& q = benchmark_queue_.empty() ? queue_ : benchmark_queue_;
      job = q.front();
      q.pop_front();
      running_ = job;
      metrics_.SetWaiting(static_cast<int>(queue_.size()));
      metrics_.SetRunning(1);
    }
    RunOne(job);
    {
      std::lock_guard<std::mutex> l(mu_);
      running_ = nullptr;
      metrics_.SetRunning(0);
    }
    cv_.notify_all();
  }
}

void Scheduler::RunOne(const std::shared_ptr<Job>& job) {
  job->scheduled = Clock::now();
  worker::v1::RunRequest req;
  req.set_request_id(job->id);
  req.mutable_prompt()->Add(job->prompt.begin(), job->prompt.end());
  *req.mutable_sampling() = job->sampling;
  req.set_max_tokens(job->max_tokens);
  for (int32_t id : job->stop_ids) req.add_stop_token_ids(id);
  for (int32_t id : job->eos_ids) req.add_eos_token_ids(id);
  const int tp = supervisor_.tp();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(tp);
  std::vector<grpc::Status> statuses(tp);
  std::string finish_reason;
  std::vector<std::thread> readers;
  for (int r = 0; r < tp; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    readers.emplace_back([&, r] {
      auto reader = supervisor_.stub(r).Run(contexts[r].get(), req);
      worker::v1::RunEvent ev;
      while (reader->Read(&ev)) {
        if (r != 0) continue;
        if (ev.done()) {
          finish_reason = ev.finish_reason();
          continue;
        }
        const auto now = Clock::now();
        std::lock_guard<std::mutex> l(job->mu);
        for (int32_t t : ev.token_ids()) {
          if (job->generated == 0) job->first_token = now;
          job->last_token = now;
          ++job->generated;
          job->tokens.push_back(t);
        }
        job->cv.notify_all();
      }
      statuses[r] = reader->Finish();
    });
  }
  for (auto& t : readers) t.join();
  for (int r = 0; r < tp; ++r) {
    if (!statuses[r].ok()) {
      LOG(ERROR) << "request " << job->id << ": rank " << r << " failed: " << statuses[r].error_message();
      const bool client_error = statuses[r].error_code() == grpc::StatusCode::INVALID_ARGUMENT;
      Finish(*job, "error", client_error ? absl::InvalidArgumentError(statuses[r].error_message())
                                         : absl::UnavailableError(absl::StrCat("rank ", r, ": ", statuses[r].error_message())));
      return;
    }
  }
  Finish(*job, finish_reason.empty() ? "error" : finish_reason,
         finish_reason.empty() ? absl::InternalError("rank 0 ended without a finish reason") : absl::OkStatus());
}

}  // namespace q38
