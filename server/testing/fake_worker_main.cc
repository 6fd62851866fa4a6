// q38-fake-worker: a rank without a model, for the coordinator's unit tests (server/*_test.cc). It
// takes the real worker's flags, serves the real worker protocol on its socket (GetInfo's startup
// phases, Run's tokens and progress, Cancel, Shutdown) and exits when the coordinator goes away, as
// worker/worker_main.cc does; but token i of a run is prompt.back() + i + 1, so a test can check
// what was relayed. Slow steps, a refused checkpoint, hangs and crashes are scripted by
// Q38_FAKE_WORKER (fake_worker_spec.h). Each rank appends what it was asked to <socket>.events,
// one line each: "run ID", "cancel ID BY", "hang ID", "end ID REASON", "shutdown".
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/parent_watch.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "proto/enum_names.h"
#include "q38/worker/v1/worker.grpc.pb.h"
#include "server/testing/fake_worker_spec.h"

ABSL_FLAG(int32_t, rank, 0, "this worker's rank");
ABSL_FLAG(int32_t, world, 1, "ranks in the group");
ABSL_FLAG(std::string, socket, "", "Unix socket to serve the worker protocol on");
ABSL_FLAG(std::string, rendezvous, "", "the group's directory: rank 0 leaves cancel marks here for the others");
ABSL_FLAG(int64_t, max_context, 4096, "reported in the manifest");
ABSL_FLAG(int64_t, prefill_chunk, 8192, "reported in the manifest");
ABSL_FLAG(int32_t, parent_pipe_fd, -1, "read end of a pipe whose writer is the coordinator; EOF means it died");
ABSL_FLAG(int32_t, parent_pid, 0, "the coordinator's pid");
// The rest of the Supervisor's command line, which means nothing without a model: accepted so that
// the fake starts from exactly the flags the real worker gets.
ABSL_FLAG(std::string, model, "", "unused");
ABSL_FLAG(std::string, device, "cpu", "unused");
ABSL_FLAG(int32_t, gpu, 0, "unused");
ABSL_FLAG(bool, decode_graph, true, "unused");
ABSL_FLAG(std::string, group, "", "unused");
ABSL_FLAG(int32_t, comm_timeout_ms, 0, "unused");
ABSL_FLAG(std::string, cpu_comm, "", "unused");
ABSL_FLAG(std::string, cpu_math, "", "unused");
ABSL_FLAG(int32_t, cpu_threads, 0, "unused");
ABSL_FLAG(std::string, cuda_grid_kernels, "", "unused");
ABSL_FLAG(int32_t, heartbeat_ms, 0, "unused: every step sends its progress");

namespace q38::fake {
namespace {

namespace wv1 = q38::worker::v1;

constexpr int kLayers = 4;
constexpr int kVocab = 1000;

[[noreturn]] void Die(const Death& death) {
  LOG(ERROR) << "dying as scripted";
  if (death.abort) {
    const rlimit no_core{0, 0};  // a test's crash is not worth a core dump
    setrlimit(RLIMIT_CORE, &no_core);
    abort();
  }
  _exit(death.code);
}

class FakeWorker final : public wv1::Worker::Service {
 public:
  explicit FakeWorker(const Behaviour& behaviour) : b_(behaviour) {
    info_.set_rank(rank_);
    info_.set_world(absl::GetFlag(FLAGS_world));
    info_.set_phase("connecting");
  }

  // Loading, then ready, unless the script refuses the checkpoint or keeps this rank loading.
  void Load() {
    SetPhase("loading", 0);
    if (b_.refuse) {
      LOG(ERROR) << "refusing the checkpoint, as scripted";
      _exit(kWorkerExitModelRefused);
    }
    if (b_.stuck_loading) return;
    for (int layer = 1; layer <= kLayers; ++layer) {
      std::this_thread::sleep_for(std::chrono::milliseconds(b_.loading_ms / kLayers));
      SetPhase("loading", layer);
    }
    std::lock_guard<std::mutex> l(mu_);
    info_.set_vocab_size(kVocab);
    q38::v1::WorkerManifest* m = info_.mutable_manifest();
    m->set_rank(rank_);
    m->set_world(info_.world());
    m->set_pid(getpid());
    m->set_max_context(absl::GetFlag(FLAGS_max_context));
    m->set_prefill_chunk(absl::GetFlag(FLAGS_prefill_chunk));
    m->set_max_num_seqs(1);
    m->set_communicator("fake");
    info_.set_phase("ready");
  }

  grpc::Status GetInfo(grpc::ServerContext*, const wv1::GetInfoRequest*, wv1::WorkerInfo* out) override {
    std::lock_guard<std::mutex> l(mu_);
    *out = info_;
    return grpc::Status::OK;
  }

  grpc::Status Run(grpc::ServerContext* ctx, const wv1::RunRequest* req, grpc::ServerWriter<wv1::RunEvent>* writer) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (info_.phase() != "ready") return {grpc::StatusCode::UNAVAILABLE, "fake worker: still " + info_.phase()};
    }
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return {grpc::StatusCode::FAILED_PRECONDITION, "fake worker: a request is already running"};
    if (req->prompt().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "fake worker: empty prompt"};
    const uint64_t id = req->request_id();
    Record(absl::StrCat("run ", id));
    cancel_.store(false);
    current_.store(id);
    // Rank 0 hears the coordinator's cancel; the others see its mark, as real ranks hear it in-band.
    auto cancelled = [&] { return cancel_.load() || ctx->IsCancelled() || std::filesystem::exists(CancelMark(id)); };
    const std::set<int32_t> stop(req->stop_token_ids().begin(), req->stop_token_ids().end());
    const std::set<int32_t> eos(req->eos_token_ids().begin(), req->eos_token_ids().end());
    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    uint64_t progress = 0;
    for (int32_t step = 0; reason == v1::FINISH_REASON_UNSPECIFIED; ++step) {
      if (b_.hang_after == step) {
        Record(absl::StrCat("hang ", id));
        while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        current_.store(0);
        return {grpc::StatusCode::CANCELLED, "fake worker: hung until cancelled"};
      }
      if (b_.exit_after && b_.exit_after->first == step) Die(b_.exit_after->second);
      std::this_thread::sleep_for(std::chrono::milliseconds(b_.token_ms));
      if (cancelled()) {
        reason = v1::FINISH_REASON_CANCELLED;
        break;
      }
      const int32_t token = req->prompt(req->prompt_size() - 1) + step + 1;
      wv1::RunEvent ev;
      ev.set_progress(++progress);
      if (rank_ == 0) ev.add_token_ids(token);
      writer->Write(ev);
      if (stop.count(token)) {
        reason = eos.count(token) ? v1::FINISH_REASON_EOS : v1::FINISH_REASON_STOP;
      } else if (step + 1 >= req->max_tokens()) {
        reason = v1::FINISH_REASON_LENGTH;
      }
    }
    current_.store(0);
    Record(absl::StrCat("end ", id, " ", FinishReasonName(reason)));
    wv1::RunEvent done;
    done.set_done(true);
    done.set_progress(progress);
    done.set_finish_reason(reason);
    writer->Write(done);
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext*, const wv1::CancelRequest* req, wv1::CancelResponse*) override {
    Record(absl::StrCat("cancel ", req->request_id(), " ", CancelReasonName(req->reason())));
    if (req->request_id() != 0 && req->request_id() == current_.load()) {
      cancel_.store(true);
      close(open(CancelMark(req->request_id()).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    }
    return grpc::Status::OK;
  }

  grpc::Status Shutdown(grpc::ServerContext*, const wv1::ShutdownRequest*, wv1::ShutdownResponse*) override {
    Record("shutdown");
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
    stop_cv_.notify_all();
    return grpc::Status::OK;
  }

  void WaitForStop() {
    std::unique_lock<std::mutex> l(stop_mu_);
    stop_cv_.wait(l, [&] { return stop_; });
  }

 private:
  void SetPhase(const std::string& phase, int layers) {
    std::lock_guard<std::mutex> l(mu_);
    info_.set_phase(phase);
    info_.set_layers_loaded(layers);
    info_.set_layers_total(kLayers);
  }

  static std::string CancelMark(uint64_t id) { return absl::StrCat(absl::GetFlag(FLAGS_rendezvous), "/cancel-", id); }

  // One line per call; O_APPEND keeps the lines of concurrent handlers whole.
  void Record(const std::string& what) const {
    const std::string line = what + "\n";
    const int fd = open(events_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      PLOG(ERROR) << "cannot record to " << events_;
    }
    if (fd >= 0) close(fd);
  }

  const Behaviour b_;
  const int rank_ = absl::GetFlag(FLAGS_rank);
  const std::string events_ = absl::GetFlag(FLAGS_socket) + ".events";
  std::mutex mu_;
  wv1::WorkerInfo info_;
  std::mutex run_mu_;
  std::atomic<uint64_t> current_{0};
  std::atomic<bool> cancel_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

int Main() {
  ExitWhenParentGone(absl::GetFlag(FLAGS_parent_pid), absl::GetFlag(FLAGS_parent_pipe_fd));
  const char* spec = std::getenv(kBehaviourEnv);
  absl::StatusOr<Behaviour> behaviour = ParseBehaviour(spec == nullptr ? "" : spec, absl::GetFlag(FLAGS_rank));
  if (!behaviour.ok()) {
    LOG(ERROR) << behaviour.status();
    return 1;
  }
  if (behaviour->exit_at_start) Die(*behaviour->exit_at_start);
  const std::string socket = absl::GetFlag(FLAGS_socket);
  FakeWorker service(*behaviour);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    LOG(ERROR) << "cannot serve on unix:" << socket;
    return 1;
  }
  service.Load();
  service.WaitForStop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace q38::fake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return q38::fake::Main();
}
