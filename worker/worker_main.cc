// q38-worker: one rank. Joins the group's communicator, loads its weight shard, and serves the
// worker protocol on a Unix socket until the coordinator says Shutdown or goes away.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/parent_watch.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "proto/enum_names.h"
#include "q38/worker/v1/worker.grpc.pb.h"
#include "worker/engine/engine.h"
#include "worker/rank_device.h"
#include "worker/manifest.h"

ABSL_FLAG(int32_t, rank, 0, "this worker's rank");
ABSL_FLAG(int32_t, world, 1, "ranks in the group");
ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(int32_t, gpu, 0, "with --device cuda: the GPU ordinal this rank runs on");
ABSL_FLAG(bool, decode_graph, true, "replay each decode step as a recorded graph (CUDA graphs on GPUs)");
ABSL_FLAG(std::string, socket, "", "Unix socket to serve the worker protocol on");
ABSL_FLAG(std::string, rendezvous, "", "directory of the communicator's file store");
ABSL_FLAG(std::string, group, "q38", "prefix that keeps this group's rendezvous apart");
ABSL_FLAG(int32_t, comm_timeout_ms, 10000, "a collective stuck longer than this fails");
ABSL_FLAG(std::string, cpu_comm, "shm", "CPU ranks meet over shm (shared memory, one host) or gloo (TCP)");
ABSL_FLAG(std::string, cpu_math, "fast", "CPU ranks' arithmetic: fast (FP32 SIMD) or exact (the double-accumulating reference)");
ABSL_FLAG(int32_t, cpu_threads, 0, "threads of a fast CPU rank (0: the host's cores shared out over the world)");
ABSL_FLAG(std::string, cuda_grid_kernels, "all",
          "CUDA ranks' decode kernels with grid-wide barriers: all (the indexer's selection at long context) or none");
ABSL_FLAG(int64_t, max_context, 4096, "the longest sequence (prompt + generated) this worker holds");
ABSL_FLAG(int64_t, prefill_chunk, 8192, "prefill runs in chunks of at most this many tokens");
ABSL_FLAG(int32_t, parent_pipe_fd, -1, "read end of a pipe whose writer is the coordinator; EOF means it died");
ABSL_FLAG(int32_t, parent_pid, 0, "the coordinator's pid");
ABSL_FLAG(int32_t, heartbeat_ms, 1000, "while a request runs, send the rank's progress at least this often");

namespace q38 {
namespace {

namespace wv1 = q38::worker::v1;

// Serves from the start of the process, so the coordinator can watch startup: GetInfo reports the
// phase (and loading progress) until the engine is ready; Run refuses until then.
class WorkerService final : public wv1::Worker::Service {
 public:
  explicit WorkerService(wv1::WorkerInfo info) : info_(std::move(info)) { info_.set_phase("connecting"); }

  void SetLoading(int done, int total) {
    std::lock_guard<std::mutex> l(info_mu_);
    info_.set_phase("loading");
    info_.set_layers_loaded(done);
    info_.set_layers_total(total);
  }
  void SetReady(Engine* engine, const wv1::WorkerInfo& info) {
    std::lock_guard<std::mutex> l(info_mu_);
    const int loaded = info_.layers_loaded(), total = info_.layers_total();
    info_ = info;
    info_.set_phase("ready");
    info_.set_layers_loaded(loaded);
    info_.set_layers_total(total);
    engine_ = engine;
  }

  grpc::Status GetInfo(grpc::ServerContext*, const wv1::GetInfoRequest* req, wv1::WorkerInfo* out) override {
    std::lock_guard<std::mutex> l(info_mu_);
    if (req->refresh_manifest() && info_.phase() == "ready") {
      absl::StatusOr<std::vector<MappedObject>> objects = MappedSharedObjects();
      if (!objects.ok()) return {grpc::StatusCode::INTERNAL, std::string(objects.status().message())};
      SetMappedObjects(*objects, *info_.mutable_manifest());
    }
    *out = info_;
    return grpc::Status::OK;
  }

  grpc::Status Run(grpc::ServerContext* ctx, const wv1::RunRequest* req, grpc::ServerWriter<wv1::RunEvent>* writer) override {
    Engine* engine_ptr;
    {
      std::lock_guard<std::mutex> l(info_mu_);
      engine_ptr = engine_;
      if (engine_ptr == nullptr) return {grpc::StatusCode::UNAVAILABLE, "worker: still " + info_.phase()};
    }
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return {grpc::StatusCode::FAILED_PRECONDITION, "worker: a request is already running"};
    RunSpec spec;
    spec.request_id = req->request_id();
    spec.prompt.assign(req->prompt().begin(), req->prompt().end());
    spec.sampling = {req->sampling().temperature(), req->sampling().top_k(), req->sampling().top_p(), req->sampling().seed()};
    spec.max_tokens = req->max_tokens();
    spec.stop_ids.insert(req->stop_token_ids().begin(), req->stop_token_ids().end());
    spec.eos_ids.insert(req->eos_token_ids().begin(), req->eos_token_ids().end());
    spec.prefill_chunk = prefill_chunk_;
    spec.logprobs = req->has_logprobs() ? req->logprobs() : -1;
    if (spec.logprobs > static_cast<int32_t>(cpu::kMaxTopLogits)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "logprobs: at most 20 alternatives"};
    }
    if (absl::Status s = ValidateSampling(spec.sampling); !s.ok()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message())};
    }
    current_.store(spec.request_id);
    cancel_.store(false);
    // The decode loop never waits on the stream: tokens go through a queue that this handler
    // thread writes out while the engine runs on its own thread. Only rank 0 streams tokens
    // (worker.proto): the others sample the same ones, and sending them too cost every rank and
    // the coordinator a message per token that the coordinator dropped.
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> pending;
    std::vector<q38::v1::TokenLogprob> pending_logprobs;
    bool finished = false;
    absl::StatusOr<RunResult> r = absl::UnknownError("not run");
    std::thread engine([&] {
      auto emit = [&](int32_t token, const std::optional<TokenLogprobs>& logprobs) {
        if (rank_ != 0) return;
        std::lock_guard<std::mutex> l(mu);
        pending.push_back(token);
        if (logprobs) {
          q38::v1::TokenLogprob& lp = pending_logprobs.emplace_back();
          lp.set_id(token);
          lp.set_logprob(logprobs->logprob);
          for (const auto& [id, logprob] : logprobs->top) {
            q38::v1::TopLogprob* t = lp.add_top();
            t->set_id(id);
            t->set_logprob(logprob);
          }
        }
        cv.notify_one();
      };
      auto cancelled = [&] { return cancel_.load() || ctx->IsCancelled(); };
      absl::StatusOr<RunResult> result = engine_ptr->Run(spec, emit, cancelled);
      std::lock_guard<std::mutex> l(mu);
      r = std::move(result);
      finished = true;
      cv.notify_one();
    });
    // Every rank also sends its progress at least once per heartbeat, so the coordinator can tell
    // a rank that computes from one that is stuck.
    for (bool done = false; !done;) {
      wv1::RunEvent ev;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait_for(l, heartbeat_, [&] { return finished || !pending.empty(); });
        ev.mutable_token_ids()->Add(pending.begin(), pending.end());
        for (auto& lp : pending_logprobs) *ev.add_logprobs() = std::move(lp);
        pending.clear();
        pending_logprobs.clear();
        done = finished;
      }
      ev.set_progress(engine_ptr->progress());
      if (!done || ev.token_ids_size() > 0) writer->Write(ev);
    }
    engine.join();
    current_.store(0);
    if (!r.ok()) {
      LOG(ERROR) << "rank " << rank_ << ": request " << spec.request_id << " failed: " << r.status();
      // A broken collective leaves the communicator unusable: report, then leave.
      if (absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()) || absl::IsInternal(r.status())) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          _exit(3);
        }).detach();
        return {grpc::StatusCode::UNAVAILABLE, std::string(r.status().message())};
      }
      return {grpc::StatusCode::INVALID_ARGUMENT, std::string(r.status().message())};
    }
    wv1::RunEvent done;
    done.set_done(true);
    done.set_progress(engine_ptr->progress());
    done.set_finish_reason(r->finish_reason);
    done.set_prefill_seconds(r->prefill_seconds);
    writer->Write(done);
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext*, const wv1::CancelRequest* req, wv1::CancelResponse*) override {
    if (req->request_id() != 0 && req->request_id() == current_.load() && !cancel_.exchange(true)) {
      LOG(INFO) << "rank " << rank_ << ": request " << req->request_id() << " cancelled (" << CancelReasonName(req->reason()) << ")";
    }
    return grpc::Status::OK;
  }

  grpc::Status Shutdown(grpc::ServerContext*, const wv1::ShutdownRequest*, wv1::ShutdownResponse*) override {
    RequestStop();
    return grpc::Status::OK;
  }

  void RequestStop() {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
    stop_cv_.notify_all();
  }
  void WaitForStop() {
    std::unique_lock<std::mutex> l(stop_mu_);
    stop_cv_.wait(l, [&] { return stop_; });
  }

 private:
  std::mutex info_mu_;
  wv1::WorkerInfo info_;
  Engine* engine_ = nullptr;
  const int rank_ = absl::GetFlag(FLAGS_rank);
  const int64_t prefill_chunk_ = absl::GetFlag(FLAGS_prefill_chunk);
  const std::chrono::milliseconds heartbeat_{absl::GetFlag(FLAGS_heartbeat_ms)};
  std::mutex run_mu_;
  std::atomic<uint64_t> current_{0};
  std::atomic<bool> cancel_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

bool model_refused = false;

// Marks a failure as the checkpoint's own (exit code kWorkerExitModelRefused).
absl::Status ModelRefused(absl::Status s) {
  model_refused = true;
  return s;
}

absl::Status Main() {
  ExitWhenParentGone(absl::GetFlag(FLAGS_parent_pid), absl::GetFlag(FLAGS_parent_pipe_fd));
  const int rank = absl::GetFlag(FLAGS_rank), world = absl::GetFlag(FLAGS_world);
  const std::string dir = absl::GetFlag(FLAGS_model), socket = absl::GetFlag(FLAGS_socket);
  if (dir.empty() || socket.empty()) return absl::InvalidArgumentError("--model and --socket are required");
  // SIGTERM and SIGINT end the worker through the same path as Shutdown.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (absl::GetFlag(FLAGS_prefill_chunk) < 1) return absl::InvalidArgumentError("--prefill_chunk must be at least 1");
  wv1::WorkerInfo info;
  info.set_rank(rank);
  info.set_world(world);
  WorkerService service(info);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return absl::UnavailableError(absl::StrCat("cannot serve on unix:", socket));
  LOG(INFO) << "rank " << rank << ": serving on unix:" << socket << "; joining the communicator";
  std::thread([&service, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "signal " << sig << "; stopping";
    service.RequestStop();
  }).detach();

  absl::StatusOr<ModelConfig> loaded_config = LoadModelConfig(dir);
  if (!loaded_config.ok()) return ModelRefused(loaded_config.status());
  const ModelConfig& config = *loaded_config;
  absl::StatusOr<std::unique_ptr<TensorStore>> opened = TensorStore::Open(dir);
  if (!opened.ok()) return ModelRefused(opened.status());
  std::unique_ptr<TensorStore> store = *std::move(opened);
  ASSIGN_OR_RETURN(const CpuMath cpu_math, ParseCpuMath(absl::GetFlag(FLAGS_cpu_math)));
  ASSIGN_OR_RETURN(RankDevice device,
                   OpenRankDevice({.rank = rank, .world = world, .device = absl::GetFlag(FLAGS_device),
                                   .gpu = absl::GetFlag(FLAGS_gpu), .rendezvous = absl::GetFlag(FLAGS_rendezvous),
                                   .group = absl::GetFlag(FLAGS_group), .timeout_ms = absl::GetFlag(FLAGS_comm_timeout_ms),
                                   .cpu_comm = absl::GetFlag(FLAGS_cpu_comm),
                                   .cuda_grid_kernels = absl::GetFlag(FLAGS_cuda_grid_kernels), .cpu_math = cpu_math,
                                   .cpu_threads = absl::GetFlag(FLAGS_cpu_threads)}));
  std::unique_ptr<Communicator>& comm = device.comm;
  std::unique_ptr<Backend>& backend = device.backend;
  LOG(INFO) << "rank " << rank << "/" << world << " on " << device.description << ": communicator " << comm->version()
            << " ready; loading " << dir;
  service.SetLoading(0, config.num_layers);
  absl::StatusOr<ModelWeights> weights = LoadWeights(config, *store, *backend, {rank, world},
                                                    [&](int done, int total) { service.SetLoading(done, total); });
  // Out of memory or a device fault is not the checkpoint's fault.
  if (!weights.ok() && !absl::IsResourceExhausted(weights.status()) && !absl::IsUnavailable(weights.status()) &&
      !absl::IsInternal(weights.status())) {
    return ModelRefused(weights.status());
  }
  if (!weights.ok()) return weights.status();
  Model model(config, *std::move(weights), *backend, *comm, {.decode_graph = absl::GetFlag(FLAGS_decode_graph)});
  const int64_t max_context = std::min<int64_t>(absl::GetFlag(FLAGS_max_context), config.max_position_embeddings);
  Engine engine(model, max_context, config.vocab_size);

  WorkerManifest manifest;
  manifest.rank = rank;
  manifest.world = world;
  manifest.backend = device.manifest;
  // Only the GPU records graphs; a CPU "replay" runs the ops again.
  if (absl::GetFlag(FLAGS_decode_graph) && absl::GetFlag(FLAGS_device) == "cuda") {
    manifest.backend.graph_mode = "FULL_DECODE_ONLY";
  }
  manifest.max_context = max_context;
  manifest.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  manifest.communicator = comm->version();
  ASSIGN_OR_RETURN(manifest.model, IdentifyModel(dir, config, *store, model.weights().experts_nvfp4));
  RETURN_IF_ERROR(GatherProcess(manifest));
  *info.mutable_manifest() = ToProto(manifest);
  info.set_vocab_size(static_cast<int32_t>(config.vocab_size));
  service.SetReady(&engine, info);
  LOG(INFO) << "rank " << rank << ": ready";
  service.WaitForStop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  LOG(INFO) << "rank " << rank << ": stopped";
  return absl::OkStatus();
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (absl::Status s = q38::Main(); !s.ok()) {
    LOG(ERROR) << "q38-worker: " << s;
    return q38::model_refused ? q38::kWorkerExitModelRefused : 1;
  }
  return 0;
}
