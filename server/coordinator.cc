#include "server/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/mapped_objects.h"
#include "common/sha256.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/group_check.h"

namespace q38 {
namespace {

// VmRSS of a process in bytes (0 when it is gone).
double ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // "VmRSS:   1234 kB"
  }
  return 0;
}

// The verdict's exit code, logged; kExitStopped when it passed.
ServerExit Refused(const Verdict& v) {
  if (v.ok()) return kExitStopped;
  LOG(ERROR) << "bundle refused (" << RefusalName(v.refusal) << "): " << v.message;
  return static_cast<ServerExit>(v.exit_code());
}

// Verifies the bundle, that this process and the worker binary are its own, and that this process
// maps only its libraries; fills `bundle` and `worker`.
ServerExit VerifyStartingBundle(const std::string& dir, const std::string& source, Bundle& bundle, std::string& worker) {
  if (ServerExit e = Refused(VerifyBundle(dir, source, &bundle))) return e;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (ServerExit e = Refused(CheckBundledExecutable(bundle, "q38-server", self))) return e;
  if (worker.empty()) worker = bundle.BinaryPath("q38-worker");
  if (ServerExit e = Refused(CheckBundledExecutable(bundle, "q38-worker", worker))) return e;
  absl::StatusOr<std::vector<MappedObject>> own = MappedSharedObjects();
  if (!own.ok()) return LOG(ERROR) << own.status(), kExitBadFlags;
  if (ServerExit e = Refused(CheckMappedObjects(bundle, "q38-server", *own))) return e;
  LOG(INFO) << "bundle " << bundle.dir << " verified: commit " << bundle.build.source.commit << ", " << bundle.files.size() << " files";
  return kExitStopped;
}

// q38-worker beside this binary's folder (build/worker/q38-worker) or beside this binary.
std::string DefaultWorkerBinary() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path built = self.parent_path().parent_path() / "worker" / "q38-worker";
  return std::filesystem::exists(built) ? built.string() : (self.parent_path() / "q38-worker").string();
}

}  // namespace

const char* StateName(CoordinatorState state) {
  switch (state) {
    case CoordinatorState::kStarting: return "starting";
    case CoordinatorState::kReady: return "ready";
    case CoordinatorState::kRestarting: return "loading";
    case CoordinatorState::kDraining: return "draining";
    case CoordinatorState::kStopping: return "stopping";
    case CoordinatorState::kStopped: return "stopped";
  }
  return "unknown";
}

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {}

Coordinator::~Coordinator() {
  if (memory_sampler_.joinable()) {
    sampling_.store(false);
    memory_sampler_.join();
  }
  if (supervisor_) supervisor_->KillAll();
}

void Coordinator::PostShutdown() {
  std::lock_guard<std::mutex> l(events_mu_);
  events_.push_back({Event::kShutdown});
  events_cv_.notify_all();
}

void Coordinator::PostDrain() {
  std::lock_guard<std::mutex> l(events_mu_);
  events_.push_back({Event::kDrain});
  events_cv_.notify_all();
}

void Coordinator::PostGroupFailed(const std::string& what, int generation) {
  std::lock_guard<std::mutex> l(events_mu_);
  events_.push_back({Event::kGroupFailed, what, generation});
  events_cv_.notify_all();
}

Coordinator::Posted Coordinator::NextEvent() {
  std::unique_lock<std::mutex> l(events_mu_);
  events_cv_.wait(l, [&] { return !events_.empty(); });
  Posted e = events_.front();
  events_.pop_front();
  return e;
}

ServerExit Coordinator::Run() {
  if (ServerExit e = Start()) {
    if (supervisor_) supervisor_->KillAll();
    return e;
  }
  const ServerExit e = Serve();
  Stop();
  LOG(INFO) << "stopped (exit code " << e << ")";
  return e;
}

void Coordinator::Enter(CoordinatorState state) {
  state_ = state;
  const bool up = state == CoordinatorState::kReady;
  if (server_) server_->GetHealthCheckService()->SetServingStatus("q38.v1.Q38", up);
  if (http_api_) http_api_->SetServing(up);
  if (api_) api_->SetState(StateName(state));
  if (metrics_) metrics_->SetServerState(StateName(state));
}

ServerExit Coordinator::Start() {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(options_.model);
  if (!config.ok()) return LOG(ERROR) << config.status(), kExitModelRefused;
  config_ = *std::move(config);
  absl::StatusOr<GenerationConfig> generation = LoadGenerationConfig(options_.model);
  if (!generation.ok()) return LOG(ERROR) << generation.status(), kExitModelRefused;
  generation_ = *std::move(generation);

  // The bundle is verified before anything is spawned.
  worker_binary_ = options_.worker_binary;
  if (!options_.bundle.empty()) {
    if (ServerExit e = VerifyStartingBundle(options_.bundle, options_.source, bundle_, worker_binary_)) return e;
  }
  // Run directories of coordinators that were killed outright go first; this one goes on every way out.
  if (int stale = RemoveStaleRunDirs("/tmp"); stale > 0) LOG(INFO) << "removed " << stale << " stale run director(ies) in /tmp";
  absl::StatusOr<RunDir> run_dir = RunDir::Create(options_.run_dir);
  if (!run_dir.ok()) return LOG(ERROR) << run_dir.status(), kExitCannotServe;
  run_dir_.emplace(*std::move(run_dir));
  absl::StatusOr<Access> access = Access::Load(options_.access);
  if (!access.ok()) return LOG(ERROR) << access.status(), kExitCannotServe;
  access_ = *std::move(access);
  if (worker_binary_.empty()) worker_binary_ = DefaultWorkerBinary();
  max_context_ = std::min<int64_t>(options_.max_context, config_->max_position_embeddings);

  metrics_ = std::make_unique<Metrics>(BuildInfo{"0.1", bundle_.build.source.commit, Sha256File("/proc/self/exe").value_or(""),
                                                 __VERSION__, options_.device, options_.tp, bundle_.build.source.fingerprint});
  Enter(CoordinatorState::kStarting);
  if (!options_.metrics.empty()) {
    absl::StatusOr<int> port = metrics_->Serve(options_.metrics, options_.access.tls_cert, options_.access.tls_key);
    if (!port.ok()) return LOG(ERROR) << port.status(), kExitCannotServe;
    metrics_port_ = *port;
    LOG(INFO) << "metrics on " << options_.metrics << " (port " << *port << ")";
  }
  for (int r = 0; r < options_.tp; ++r) metrics_->SetWorkerState(r, "starting");

  std::vector<std::string> worker_env = options_.worker_env;
  if (!options_.bundle.empty()) worker_env.insert(worker_env.begin(), "LD_LIBRARY_PATH=" + bundle_.dir + "/lib");
  // A running rank reports at least four times per step timeout.
  const int heartbeat_ms = static_cast<int>(std::clamp<int64_t>(int64_t{options_.step_timeout_s} * 1000 / 4, 50, 1000));
  supervisor_ = std::make_unique<Supervisor>(
      SupervisorOptions{worker_binary_, options_.model, options_.device, options_.gpus, options_.decode_graph,
                        run_dir_->path(), options_.tp, max_context_, options_.prefill_chunk, options_.comm_timeout_ms,
                        heartbeat_ms, worker_env, options_.cpu_comm, options_.cpu_math, options_.cpu_threads,
                        options_.cuda_grid_kernels},
      [this](int rank, const std::string& how, int generation) {
        PostGroupFailed(absl::StrCat("rank ", rank, " ", how), generation);
      });
  supervisor_->OnLoadProgress([this](int rank, int done, int total) {
    LOG(INFO) << "rank " << rank << ": loaded " << done << "/" << total << " layers";
    metrics_->SetWorkerState(rank, "starting");
  });
  if (ServerExit e = StartGroup()) return e;
  if (ServerExit e = LoadTokenizer()) return e;
  FillServiceInfo();
  if (options_.contract) metrics_->SetContract(options_.contract->name, options_.contract->sha256);
  return OpenPorts();
}

v1::Manifest Coordinator::ServedManifest() const {
  // The workers' own manifests, under the group's build, bundle and contract.
  v1::Manifest m = MakeManifest(supervisor_->infos(), options_.model, options_.tp);
  m.set_bundle(bundle_.dir);
  m.set_git_commit(bundle_.build.source.commit);
  m.set_source_fingerprint(bundle_.build.source.fingerprint);
  if (options_.contract) m.set_contract(options_.contract->name);
  return m;
}

ServerExit Coordinator::CheckGroup() {
  if (absl::Status s = q38::CheckGroup(supervisor_->infos(), options_.tp); !s.ok()) {
    return LOG(ERROR) << "refusing to serve: " << s, kExitGroupMismatch;
  }
  if (!options_.bundle.empty()) {
    if (ServerExit e = Refused(CheckGroupAgainstBundle(supervisor_->infos(), bundle_))) return e;
  }
  if (options_.contract) {
    if (absl::Status s = CheckContract(*options_.contract, ServedManifest()); !s.ok()) {
      return LOG(ERROR) << "refusing to serve: " << s, kExitContract;
    }
  }
  return kExitStopped;
}

ServerExit Coordinator::StartGroup() {
  metrics_->SetServerState("loading");
  LOG(INFO) << "starting " << options_.tp << " worker(s) of " << worker_binary_;
  if (absl::Status s = supervisor_->Start(absl::Seconds(options_.startup_timeout_s)); !s.ok()) {
    LOG(ERROR) << "workers did not start: " << s;
    return absl::IsFailedPrecondition(s) ? kExitModelRefused : kExitWorkersNotStarted;
  }
  if (ServerExit e = CheckGroup()) return e;
  for (int r = 0; r < options_.tp; ++r) metrics_->SetWorkerState(r, "ready");
  return kExitStopped;
}

ServerExit Coordinator::LoadTokenizer() {
  // The checkpoint's tokenizer, when it ships one, turns text and chat into ids and ids into text.
  if (!std::filesystem::exists(options_.model + "/tokenizer.json")) return kExitStopped;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromDirectory(options_.model);
  if (!t.ok()) return LOG(ERROR) << "tokenizer: " << t.status(), kExitModelRefused;
  tokenizer_ = *std::move(t);
  if (tokenizer_->vocab_size() > config_->vocab_size) {
    return LOG(ERROR) << "tokenizer has " << tokenizer_->vocab_size() << " ids, the model " << config_->vocab_size,
           kExitModelRefused;
  }
  return kExitStopped;
}

void Coordinator::FillServiceInfo() {
  info_.tokenizer = tokenizer_.get();
  info_.chat_special_tokens_in_content = options_.chat_special_tokens_in_content;
  info_.info.set_has_tokenizer(tokenizer_ != nullptr);
  info_.limits = {config_->vocab_size, max_context_};
  info_.eos_ids.assign(generation_->eos_token_ids.begin(), generation_->eos_token_ids.end());
  info_.info.set_version("0.1");
  info_.info.set_model_type(config_->model_type);
  info_.info.set_vocab_size(static_cast<int32_t>(config_->vocab_size));
  info_.info.set_max_context(static_cast<int32_t>(max_context_));
  info_.info.set_tp(options_.tp);
  info_.info.set_device(options_.device);
  for (int64_t id : generation_->eos_token_ids) info_.info.add_eos_token_ids(static_cast<int32_t>(id));
  info_.manifest = ServedManifest();
  info_.generation = *generation_;
  if (!options_.bundle.empty()) info_.build = BuildManifestJson(bundle_.build);
  info_.refresh_manifest = [this]() -> absl::StatusOr<v1::Manifest> {
    RETURN_IF_ERROR(supervisor_->RefreshManifests(absl::Seconds(90)));
    if (ServerExit e = CheckGroup()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the workers' manifests fail the group checks (exit code ", e, "; see the server log)"));
    }
    return ServedManifest();
  };
}

ServerExit Coordinator::OpenPorts() {
  scheduler_ = std::make_unique<Scheduler>(
      *supervisor_, *metrics_,
      SchedulerOptions{static_cast<size_t>(options_.queue_size), std::chrono::seconds(options_.step_timeout_s),
                       [this](const std::string& why, int generation) { PostGroupFailed(why, generation); }});
  generations_ = std::make_unique<Generations>(*scheduler_, *metrics_, info_);
  api_ = std::make_unique<Q38Service>(*scheduler_, *metrics_, *access_, info_, *generations_);
  admin_ = std::make_unique<AdminService>([this] { PostDrain(); }, [this] { PostShutdown(); }, *scheduler_, *access_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, access_->ServerCredentials(), &grpc_port_);
  if (!options_.unix_socket.empty()) {
    std::filesystem::remove(options_.unix_socket);  // a socket left by a killed server
    builder.AddListeningPort("unix:" + options_.unix_socket, grpc::InsecureServerCredentials());
  }
  // Oversized requests are refused by their length, before they are buffered, parsed or tokenized.
  max_request_bytes_ = options_.max_request_bytes > 0 ? options_.max_request_bytes
                                                      : std::max<int64_t>(int64_t{1} << 20, 32 * max_context_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_request_bytes_, INT32_MAX)));
  // The size check sees a message only once it has arrived: a memory quota over every connection's
  // buffers keeps many large requests at once from being buffered in full first.
  quota_ = std::make_unique<grpc::ResourceQuota>("q38-server");
  quota_->Resize(static_cast<size_t>(std::max<int64_t>(32 << 20, 4 * max_request_bytes_)));
  builder.SetResourceQuota(*quota_);
  builder.RegisterService(api_.get());
  builder.RegisterService(admin_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    LOG(ERROR) << "cannot listen on " << options_.listen;
    supervisor_->Stop(absl::Seconds(5));
    return kExitCannotServe;
  }
  if (!options_.http.empty()) {
    std::string name = options_.served_model_name;
    const std::filesystem::path model = std::filesystem::path(options_.model).lexically_normal();
    if (name.empty()) name = model.filename().string();
    if (name.empty()) name = model.parent_path().filename().string();  // "DIR/"
    absl::StatusOr<std::unique_ptr<http::HttpFrontEnd>> started = http::HttpFrontEnd::Start(
        {options_.http, name, max_request_bytes_, options_.access.tls_cert, options_.access.tls_key,
         options_.queue_size + 16},
        *generations_, *access_, info_);
    if (!started.ok()) {
      LOG(ERROR) << started.status();
      server_->Shutdown();
      supervisor_->Stop(absl::Seconds(5));
      return kExitCannotServe;
    }
    http_api_ = *std::move(started);
    LOG(INFO) << "serving the HTTP API on port " << http_api_->port() << " as model \"" << name << "\"";
  }
  return kExitStopped;
}

void Coordinator::WriteReadyFile() const {
  if (options_.ready_file.empty()) return;
  const std::string tmp = options_.ready_file + ".tmp";
  std::ofstream(tmp) << absl::StrCat("{\"grpc_port\": ", grpc_port_, ", \"metrics_port\": ", metrics_port_,
                                     ", \"http_port\": ", http_api_ ? http_api_->port() : 0, ", \"pid\": ", getpid(), "}\n");
  std::filesystem::rename(tmp, options_.ready_file);
}

void Coordinator::SampleMemory() {
  const std::vector<pid_t> pids = supervisor_->pids();
  for (size_t r = 0; r < pids.size(); ++r) {
    metrics_->SetWorkerMemoryBytes(static_cast<int>(r), pids[r] != 0 ? ResidentBytes(pids[r]) : 0);
  }
}

ServerExit Coordinator::Serve() {
  scheduler_->SetAvailable(true);
  Enter(CoordinatorState::kReady);
  LOG(INFO) << "serving on port " << grpc_port_ << " (" << options_.listen << "), TP " << options_.tp
            << (access_->tls() ? ", TLS" : "") << (access_->requires_api_key() ? ", API key required" : "");
  WriteReadyFile();
  // Resident memory of each rank every two seconds, 0 once it is reaped, until the workers are
  // stopped: a rank that does not exit shows what it still holds (deploy/prometheus alerts on it).
  sampling_.store(true);
  memory_sampler_ = std::thread([this] {
    while (sampling_.load()) {
      SampleMemory();
      for (int i = 0; i < 20 && sampling_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (;;) {
    const Posted e = NextEvent();
    switch (e.event) {
      case Event::kShutdown:
        return kExitStopped;
      case Event::kDrain:
        LOG(INFO) << "draining: no new requests";
        Enter(CoordinatorState::kDraining);
        scheduler_->Drain(Clock::now());
        break;
      case Event::kGroupFailed:
        if (e.generation != supervisor_->generation()) {
          LOG(INFO) << "already restarted past: " << e.detail;
          break;
        }
        if (!Restart(e.detail)) return kExitWorkerFailed;
        break;
    }
  }
}

bool Coordinator::Restart(const std::string& detail) {
  // Requests wait in the queue meanwhile and run on the new group; a drain stays a drain.
  LOG(ERROR) << "worker failure: " << detail;
  scheduler_->Pause();
  Enter(CoordinatorState::kRestarting);
  scheduler_->FailRunning(detail);
  supervisor_->KillAll();
  for (int r = 0; r < options_.tp; ++r) metrics_->SetWorkerState(r, "dead");
  while (options_.restart_on_failure && restarts_ < options_.max_restarts) {
    const int backoff_ms = 500 << restarts_++;
    LOG(INFO) << "restarting the group in " << backoff_ms << " ms (restart " << restarts_ << ")";
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    if (StartGroup() == kExitStopped) {
      Enter(scheduler_->draining() ? CoordinatorState::kDraining : CoordinatorState::kReady);
      scheduler_->Resume();
      return true;
    }
    supervisor_->KillAll();
  }
  LOG(ERROR) << "giving up after a worker failure";
  scheduler_->SetAvailable(false);
  scheduler_->FailQueued(absl::UnavailableError("the server's workers failed and could not be restarted; the server is stopping"));
  return false;
}

void Coordinator::Stop() {
  // Refuse new work, let in-flight requests finish until the deadline, cancel the rest, stop the
  // workers (killing stragglers), then the ports.
  Enter(CoordinatorState::kStopping);
  const auto deadline = Clock::now() + std::chrono::seconds(options_.drain_timeout_s);
  if (!scheduler_->Drain(deadline)) {
    LOG(WARNING) << "drain deadline passed; cancelling what remains";
    scheduler_->CancelAll(worker::v1::CANCEL_REASON_DRAIN);
    scheduler_->Drain(Clock::now() + std::chrono::seconds(5));
  }
  supervisor_->Stop(absl::Seconds(5));
  sampling_.store(false);
  memory_sampler_.join();
  SampleMemory();
  for (int r = 0; r < options_.tp; ++r) metrics_->SetWorkerState(r, "stopped");
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http_api_.reset();
  scheduler_->Stop();
  state_ = CoordinatorState::kStopped;
  metrics_->SetServerState(StateName(state_));
}

}  // namespace q38
