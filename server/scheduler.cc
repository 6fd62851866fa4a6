#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace q38 {
Scheduler::Scheduler(Supervisor& supervisor, Metrics& metrics, SchedulerOptions options)
    : supervisor_(supervisor), metrics_(metrics), options_(std::move(options)), thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Stop(); }

BenchmarkHold::~BenchmarkHold() {
  if (s_ != nullptr) s_->EndBenchmark();
}

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
  if (queue_.size() >= options_.queue_size) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full (", options_.queue_size, " waiting)"));
  }
  queue_.push_back(std::move(job));
  metrics_.SetWaiting(static_cast<int>(queue_.size()));
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<BenchmarkHold> Scheduler::BeginBenchmark() {
  std::lock_guard<std::mutex> l(mu_);
  if (draining_ || stopping_) return absl::UnavailableError("server is draining; not accepting requests");
  if (!available_ || paused_) return absl::UnavailableError("workers are not ready");
  if (benchmarking_) return absl::ResourceExhaustedError("a benchmark is already running");
  benchmarking_ = true;
  return BenchmarkHold(this);
}

void Scheduler::EndBenchmark() {
  {
    std::lock_guard<std::mutex> l(mu_);
    benchmarking_ = false;
  }
  cv_.notify_all();
}

void Scheduler::Finish(Job& job, v1::FinishReason reason, absl::Status error) {
  std::lock_guard<std::mutex> l(job.mu);
  if (job.done) return;
  job.done = true;
  job.finish_reason = reason;
  job.error = std::move(error);
  job.finished = Clock::now();
  job.cv.notify_all();
}

void Scheduler::Cancel(const std::shared_ptr<Job>& job, worker::v1::CancelReason by) {
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
    Finish(*job, v1::FINISH_REASON_CANCELLED);
    return;
  }
  SendCancel(*job);  // and RunOne sends it again until the job ends
}

void Scheduler::SendCancel(Job& job) {
  // Rank 0 decides; it stops every rank in-band at the next step or prefill block.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  worker::v1::CancelRequest req;
  req.set_request_id(job.id);
  {
    std::lock_guard<std::mutex> l(job.mu);
    req.set_reason(job.cancel_by);
  }
  worker::v1::CancelResponse resp;
  supervisor_.stub(0).Cancel(&ctx, req, &resp);
}

void Scheduler::FailRunning(const std::string& why) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> l(mu_);
    job = running_;
  }
  if (job) {
    Finish(*job, v1::FINISH_REASON_ERROR, absl::UnavailableError(absl::StrCat("a worker failed during this request (", why,
                                                              "); the request is lost: send it again")));
  }
}

void Scheduler::Pause() {
  std::lock_guard<std::mutex> l(mu_);
  paused_ = true;
}

void Scheduler::Resume() {
  {
    std::lock_guard<std::mutex> l(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

void Scheduler::FailQueued(const absl::Status& error) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs.assign(queue_.begin(), queue_.end());
    jobs.insert(jobs.end(), benchmark_queue_.begin(), benchmark_queue_.end());
    queue_.clear();
    benchmark_queue_.clear();
    metrics_.SetWaiting(0);
  }
  cv_.notify_all();
  for (auto& j : jobs) Finish(*j, v1::FINISH_REASON_ERROR, error);
}

bool Scheduler::draining() const {
  std::lock_guard<std::mutex> l(mu_);
  return draining_;
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

void Scheduler::CancelAll(worker::v1::CancelReason by) {
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
      cv_.wait(l, [&] { return stopping_ || (!paused_ && (!benchmark_queue_.empty() || (!benchmarking_ && !queue_.empty()))); });
      if (stopping_) return;
      auto& q = benchmark_queue_.empty() ? queue_ : benchmark_queue_;
      job = q.front();
      q.pop_front();
      running_ = job;
      metrics_.SetWaiting(static_cast<int>(queue_.size()));
      metrics_.SetRunning(1);
    }
    try {
      RunOne(job);
    } catch (const std::exception& e) {  // the job fails; the scheduler goes on
      LOG(ERROR) << "request " << job->id << ": " << e.what();
      Finish(*job, v1::FINISH_REASON_ERROR, absl::InternalError(absl::StrCat("internal error running the request: ", e.what())));
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      running_ = nullptr;
      metrics_.SetRunning(0);
    }
    cv_.notify_all();
  }
}

void Scheduler::GroupFailed(Job& job, const std::string& client_message, const std::string& why, int generation) {
  LOG(ERROR) << "request " << job.id << ": " << why;
  Finish(job, v1::FINISH_REASON_ERROR, absl::UnavailableError(client_message));
  Pause();
  if (options_.on_group_failure) options_.on_group_failure(why, generation);
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
  if (job->logprobs_asked) req.set_logprobs(*job->logprobs_asked);
  const int tp = supervisor_.tp(), generation = supervisor_.generation();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(tp);
  std::vector<grpc::Status> statuses(tp);
  // Each rank's progress counter and when it last moved; the watchdog below reads them.
  struct Watch {
    uint64_t progress = 0;
    Clock::time_point moved;
    bool ended = false;
  };
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  std::vector<Watch> watch(tp, Watch{0, Clock::now(), false});
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::vector<std::thread> readers;
  for (int r = 0; r < tp; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    readers.emplace_back([&, r] {
      auto reader = supervisor_.stub(r).Run(contexts[r].get(), req);
      worker::v1::RunEvent ev;
      while (reader->Read(&ev)) {
        const auto now = Clock::now();
        {
          std::lock_guard<std::mutex> l(watch_mu);
          if (ev.progress() != watch[r].progress) watch[r] = {ev.progress(), now, false};
        }
        if (r != 0) continue;
        if (ev.done()) {
          finish_reason = ev.finish_reason();
          continue;
        }
        if (ev.token_ids_size() == 0) continue;  // a heartbeat
        std::lock_guard<std::mutex> l(job->mu);
        for (int32_t t : ev.token_ids()) {
          if (job->generated == 0) job->first_token = now;
          job->last_token = now;
          ++job->generated;
          job->tokens.push_back(t);
        }
        for (const v1::TokenLogprob& lp : ev.logprobs()) job->logprobs.push_back(lp);
        job->cv.notify_all();
      }
      statuses[r] = reader->Finish();
      std::lock_guard<std::mutex> l(watch_mu);
      watch[r].ended = true;
      watch_cv.notify_all();
    });
  }
  // The watchdog: a rank whose progress stands still past the step timeout is stuck (stopped,
  // deadlocked, its device hung). A requested cancel is sent again until the job ends, so a rank
  // that stalled through the first one still gets it.
  int stuck = -1;
  Clock::time_point cancel_sent;
  {
    std::unique_lock<std::mutex> l(watch_mu);
    for (;;) {
      if (std::all_of(watch.begin(), watch.end(), [](const Watch& w) { return w.ended; })) break;
      const auto now = Clock::now();
      for (int r = 0; r < tp && stuck < 0; ++r) {
        if (!watch[r].ended && now - watch[r].moved > options_.step_timeout) stuck = r;
      }
      if (stuck >= 0) break;
      bool cancel;
      {
        std::lock_guard<std::mutex> jl(job->mu);
        cancel = job->cancel_requested && !job->done;
      }
      if (cancel && now - cancel_sent > std::chrono::milliseconds(250)) {
        l.unlock();
        SendCancel(*job);
        l.lock();
        cancel_sent = Clock::now();
      }
      watch_cv.wait_for(l, std::chrono::milliseconds(100));
    }
  }
  if (stuck >= 0) {
    for (auto& c : contexts) c->TryCancel();
  }
  for (auto& t : readers) t.join();
  if (stuck >= 0) {
    const std::string what = absl::StrCat("rank ", stuck, " made no progress for ",
                                          std::chrono::duration_cast<std::chrono::seconds>(options_.step_timeout).count(), " s");
    GroupFailed(*job, absl::StrCat(what, "; the request was stopped and the workers are restarted by policy: send it again"),
                what, generation);
    return;
  }
  for (int r = 0; r < tp; ++r) {
    if (statuses[r].ok()) continue;
    LOG(ERROR) << "request " << job->id << ": rank " << r << " failed: " << statuses[r].error_message();
    if (statuses[r].error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      Finish(*job, v1::FINISH_REASON_ERROR, absl::InvalidArgumentError(statuses[r].error_message()));
      return;
    }
    // The detail (sockets, ports, library sources) stays in the log; the client gets what it can act on.
    GroupFailed(*job, "a worker failed during this request; the request is lost: send it again",
                absl::StrCat("rank ", r, " failed: ", statuses[r].error_message()), generation);
    return;
  }
  if (finish_reason == v1::FINISH_REASON_UNSPECIFIED) {
    Finish(*job, v1::FINISH_REASON_ERROR, absl::InternalError("rank 0 ended without a finish reason"));
    return;
  }
  Finish(*job, finish_reason);
}

}  // namespace q38
