// q38-server: the coordinator. Verifies its bundle (when given one) before spawning anything,
// spawns one q38-worker per rank, checks that they form one build of one model (and the bundle's
// libraries, and the contract), serves the gRPC API and /metrics, and on SIGTERM, SIGINT or
// Admin.Shutdown drains and gives everything back. Exit codes: 0 graceful stop, 1 bad flags or
// model config, 2 workers did not start, 3 workers disagree (ranks, build, model or libraries), 4 a
// worker died and the policy is exit (or restarts ran out), 5 the workers deviate from --contract,
// 20-26 the bundle is refused (deploy/bundle.h, docs/bundle.md).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/sha256.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/mapped_objects.h"
#include "deploy/bundle.h"
#include "server/contract.h"
#include "server/group_check.h"
#include "server/service.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel ranks, one worker process each");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, gpus, "", "GPU indices for --device cuda, one per rank (e.g. 0,1,2,3; default 0..tp-1)");
ABSL_FLAG(bool, decode_graph, true, "workers replay each decode step as a CUDA graph");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC address");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090", "Prometheus /metrics address; empty to disable");
ABSL_FLAG(int32_t, queue_size, 16, "requests that may wait while one runs");
ABSL_FLAG(int32_t, drain_timeout_s, 30, "how long in-flight requests may finish on shutdown");
ABSL_FLAG(std::string, restart_policy, "exit", "when a worker dies: exit, or restart the group");
ABSL_FLAG(int32_t, max_restarts, 3, "restarts before giving up (restart policy)");
ABSL_FLAG(int32_t, startup_timeout_s, 120, "deadline for the workers to load and answer");
ABSL_FLAG(int32_t, comm_timeout_ms, 10000, "a collective stuck longer than this fails its request");
ABSL_FLAG(int64_t, max_context, 4096, "longest sequence, prompt plus generated tokens");
ABSL_FLAG(int64_t, prefill_chunk, 8192, "prefill chunk in tokens");
ABSL_FLAG(std::string, run_dir, "", "directory for worker sockets and the rendezvous (default: a fresh one in /tmp)");
ABSL_FLAG(std::string, worker_binary, "", "q38-worker to spawn (default: beside this binary)");
ABSL_FLAG(std::string, ready_file, "", "once serving, write {grpc_port, metrics_port, pid} here as JSON");
ABSL_FLAG(std::string, bundle, "", "run from this verified bundle (q38 bundle create): refuse on any mismatch");
ABSL_FLAG(std::string, source, "", "with --bundle: also require this checkout's production tree to be the one built");
ABSL_FLAG(std::string, contract, "", "serve under this contract file (deploy/contracts/): refuse to start when a worker deviates");
ABSL_FLAG(std::vector<std::string>, worker_env, {}, "KEY=VALUE,... set in the workers' environment");

namespace q38 {
namespace {

enum class Event { kShutdown, kDrain, kWorkerDied };

// Events for the control thread; signal handlers, RPCs and the reaper only post here.
class Control {
 public:
  void Post(Event e, std::string detail = "") {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back({e, std::move(detail)});
    cv_.notify_all();
  }
  std::pair<Event, std::string> Next() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !events_.empty(); });
    auto e = events_.front();
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Event, std::string>> events_;
};

// VmRSS of a process in bytes (0 when it is gone).
double ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // "VmRSS:   1234 kB"
  }
  return 0;
}

// Refuses with the verdict's exit code (0 when it passed).
int Refused(const Verdict& v) {
  if (v.ok()) return 0;
  LOG(ERROR) << "bundle refused (" << RefusalName(v.refusal) << "): " << v.message;
  return v.exit_code();
}

// Verifies the bundle, that this process and the worker binary are its own, and that this process
// maps only its libraries; fills `bundle` and `worker`.
int VerifyStartingBundle(const std::string& dir, Bundle& bundle, std::string& worker) {
  if (int code = Refused(VerifyBundle(dir, absl::GetFlag(FLAGS_source), &bundle))) return code;
  if (int code = Refused(CheckBundledExecutable(bundle, "q38-server", std::filesystem::read_symlink("/proc/self/exe").string()))) return code;
  if (worker.empty()) worker = bundle.BinaryPath("q38-worker");
  if (int code = Refused(CheckBundledExecutable(bundle, "q38-worker", worker))) return code;
  absl::StatusOr<std::vector<MappedObject>> own = MappedSharedObjects();
  if (!own.ok()) return LOG(ERROR) << own.status(), 1;
  if (int code = Refused(CheckMappedObjects(bundle, "q38-server", *own))) return code;
  LOG(INFO) << "bundle " << bundle.dir << " verified: commit " << bundle.build.source.commit << ", " << bundle.files.size() << " files";
  return 0;
}

// --gpus as one index per rank; empty means rank r on GPU r.
absl::StatusOr<std::vector<int>> ParseGpus(const std::string& text, int tp) {
  std::vector<int> gpus;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int g;
    if (!absl::SimpleAtoi(part, &g) || g < 0) return absl::InvalidArgumentError("--gpus: not a GPU index: " + std::string(part));
    gpus.push_back(g);
  }
  if (gpus.empty()) {
    for (int r = 0; r < tp; ++r) gpus.push_back(r);
  }
  if (static_cast<int>(gpus.size()) != tp) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus names ", gpus.size(), " GPUs for --tp ", tp));
  }
  return gpus;
}

int Run() {
  const std::string model = absl::GetFlag(FLAGS_model), policy = absl::GetFlag(FLAGS_restart_policy);
  const std::string bundle_dir = absl::GetFlag(FLAGS_bundle);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (model.empty()) return LOG(ERROR) << "--model is required", 1;
  if (tp < 1) return LOG(ERROR) << "--tp must be at least 1", 1;
  if (absl::GetFlag(FLAGS_prefill_chunk) < 1) return LOG(ERROR) << "--prefill_chunk must be at least 1", 1;
  if (policy != "exit" && policy != "restart") return LOG(ERROR) << "--restart_policy must be exit or restart", 1;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") return LOG(ERROR) << "--device must be cpu or cuda", 1;
  absl::StatusOr<std::vector<int>> gpus = ParseGpus(absl::GetFlag(FLAGS_gpus), tp);
  if (!gpus.ok()) return LOG(ERROR) << gpus.status(), 1;
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model);
  if (!config.ok()) return LOG(ERROR) << config.status(), 1;
  absl::StatusOr<GenerationConfig> gen = LoadGenerationConfig(model);
  if (!gen.ok()) return LOG(ERROR) << gen.status(), 1;
  if (!absl::GetFlag(FLAGS_source).empty() && bundle_dir.empty()) return LOG(ERROR) << "--source goes with --bundle", 1;
  std::optional<Contract> contract;
  if (const std::string file = absl::GetFlag(FLAGS_contract); !file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(file);
    absl::StatusOr<Contract> parsed = text.ok() ? ParseContract(*text) : text.status();
    if (!parsed.ok()) return LOG(ERROR) << "--contract " << file << ": " << parsed.status(), 1;
    contract = *std::move(parsed);
  }
  for (const std::string& kv : absl::GetFlag(FLAGS_worker_env)) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') return LOG(ERROR) << "--worker_env: '" << kv << "' is not KEY=VALUE", 1;
  }

  // The bundle is verified before anything is spawned.
  std::string worker = absl::GetFlag(FLAGS_worker_binary);
  Bundle bundle;
  if (!bundle_dir.empty()) {
    if (int code = VerifyStartingBundle(bundle_dir, bundle, worker)) return code;
  }

  // Signals go to one thread that turns them into events.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Control control;
  std::thread([&] {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      LOG(INFO) << "signal " << sig << " (" << strsignal(sig) << "): shutting down";
      control.Post(Event::kShutdown);
    }
  }).detach();

  std::string run_dir = absl::GetFlag(FLAGS_run_dir);
  if (run_dir.empty()) {
    run_dir = "/tmp/q38-run-XXXXXX";
    if (mkdtemp(run_dir.data()) == nullptr) return LOG(ERROR) << "cannot create a run directory", 1;
  }
  std::filesystem::create_directories(run_dir);
  if (worker.empty()) {
    worker = (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "worker" / "q38-worker").string();
    if (!std::filesystem::exists(worker)) {
      worker = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "q38-worker").string();
    }
  }
  const int64_t max_context = std::min<int64_t>(absl::GetFlag(FLAGS_max_context), config->max_position_embeddings);

  int metrics_port = 0;
  BuildInfo build{"0.1", bundle.build.source.commit, Sha256File("/proc/self/exe").value_or(""), __VERSION__, device, tp,
                  bundle.build.source.fingerprint};
  Metrics metrics(build);
  metrics.SetServerState("starting");
  if (!absl::GetFlag(FLAGS_metrics).empty()) {
    absl::StatusOr<int> port = metrics.Serve(absl::GetFlag(FLAGS_metrics));
    if (!port.ok()) return LOG(ERROR) << port.status(), 1;
    metrics_port = *port;
    LOG(INFO) << "metrics on " << absl::GetFlag(FLAGS_metrics) << " (port " << *port << ")";
  }
  for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "starting");

  std::vector<std::string> worker_env = absl::GetFlag(FLAGS_worker_env);
  if (!bundle_dir.empty()) worker_env.insert(worker_env.begin(), "LD_LIBRARY_PATH=" + bundle.dir + "/lib");
  Supervisor supervisor({worker, model, device, *gpus, absl::GetFlag(FLAGS_decode_graph), run_dir, tp, max_context,
                         absl::GetFlag(FLAGS_prefill_chunk), absl::GetFlag(FLAGS_comm_timeout_ms), worker_env},
                        [&](int rank, const std::string& how) {
                          control.Post(Event::kWorkerDied, absl::StrCat("rank ", rank, " ", how));
                        });
  supervisor.OnLoadProgress([&](int rank, int done, int total) {
    LOG(INFO) << "rank " << rank << ": loaded " << done << "/" << total << " layers";
    metrics.SetWorkerState(rank, "starting");
  });
  // The served manifest: the workers' own, under the group's build, bundle and contract.
  auto served_manifest = [&] {
    v1::Manifest m = MakeManifest(supervisor.infos(), model, tp);
    m.set_bundle(bundle.dir);
    m.set_git_commit(bundle.build.source.commit);
    m.set_source_fingerprint(bundle.build.source.fingerprint);
    if (contract) m.set_contract(contract->name);
    return m;
  };
  // The group checks; 0 or the exit code of the first that fails.
  auto check_group = [&]() -> int {
    if (absl::Status s = CheckGroup(supervisor.infos(), tp); !s.ok()) return LOG(ERROR) << "refusing to serve: " << s, 3;
    if (!bundle_dir.empty()) {
      if (int code = Refused(CheckGroupAgainstBundle(supervisor.infos(), bundle))) return code;
    }
    if (contract) {
      if (absl::Status s = CheckContract(*contract, served_manifest()); !s.ok()) return LOG(ERROR) << "refusing to serve: " << s, 5;
    }
    return 0;
  };
  auto start_group = [&]() -> int {
    metrics.SetServerState("loading");
    LOG(INFO) << "starting " << tp << " worker(s) of " << worker;
    if (absl::Status s = supervisor.Start(absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s))); !s.ok()) {
      LOG(ERROR) << "workers did not start: " << s;
      return 2;
    }
    if (int code = check_group()) return code;
    for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "ready");
    return 0;
  };
  if (int code = start_group(); code != 0) {
    supervisor.KillAll();
    return code;
  }

  // The checkpoint's tokenizer, when it ships one, turns text and chat into ids and ids into text.
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(model + "/tokenizer.json")) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromDirectory(model);
    if (!t.ok()) {
      LOG(ERROR) << "tokenizer: " << t.status();
      supervisor.KillAll();
      return 1;
    }
    tokenizer = *std::move(t);
    if (tokenizer->vocab_size() > config->vocab_size) {
      LOG(ERROR) << "tokenizer has " << tokenizer->vocab_size() << " ids, the model " << config->vocab_size;
      supervisor.KillAll();
      return 1;
    }
  }
  ServiceInfo info;
  info.tokenizer = tokenizer.get();
  info.info.set_has_tokenizer(tokenizer != nullptr);
  info.limits = {config->vocab_size, max_context};
  info.eos_ids.assign(gen->eos_token_ids.begin(), gen->eos_token_ids.end());
  info.info.set_version("0.1");
  info.info.set_model_type(config->model_type);
  info.info.set_vocab_size(static_cast<int32_t>(config->vocab_size));
  info.info.set_max_context(static_cast<int32_t>(max_context));
  info.info.set_tp(tp);
  info.info.set_device(device);
  for (int64_t id : gen->eos_token_ids) info.info.add_eos_token_ids(static_cast<int32_t>(id));
  info.manifest = served_manifest();
  info.generation = *gen;
  if (!bundle_dir.empty()) info.build = BuildManifestJson(bundle.build);
  info.refresh_manifest = [&]() -> absl::StatusOr<v1::Manifest> {
    RETURN_IF_ERROR(supervisor.RefreshManifests(absl::Seconds(90)));
    if (int code = check_group()) return absl::FailedPreconditionError(absl::StrCat("the workers' manifests fail the group checks (exit code ", code, "; see the server log)"));
    return served_manifest();
  };
  if (contract) metrics.SetContract(contract->name, contract->sha256);

  Scheduler scheduler(supervisor, metrics, absl::GetFlag(FLAGS_queue_size));
  Q38Service api(scheduler, metrics, info);
  AdminService admin([&] { control.Post(Event::kDrain); }, [&] { control.Post(Event::kShutdown); }, scheduler);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&api);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    supervisor.Stop(absl::Seconds(5));
    return 1;
  }
  auto* health = server->GetHealthCheckService();
  auto set_serving = [&](bool up, const std::string& state) {
    health->SetServingStatus("q38.v1.Q38", up);
    scheduler.SetAvailable(up);
    api.SetState(state);
    metrics.SetServerState(state);
  };
  set_serving(true, "ready");
  LOG(INFO) << "serving on port " << port << " (" << absl::GetFlag(FLAGS_listen) << "), TP " << tp;
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file); !ready.empty()) {
    const std::string tmp = ready + ".tmp";
    std::ofstream(tmp) << absl::StrCat("{\"grpc_port\": ", port, ", \"metrics_port\": ", metrics_port, ", \"pid\": ", getpid(), "}\n");
    std::filesystem::rename(tmp, ready);
  }

  // Resident memory of each rank every two seconds, 0 once it is reaped, until the workers are
  // stopped: a rank that does not exit shows what it still holds (deploy/prometheus alerts on it).
  auto sample_memory = [&] {
    const std::vector<pid_t> pids = supervisor.pids();
    for (size_t r = 0; r < pids.size(); ++r) {
      metrics.SetWorkerMemoryBytes(static_cast<int>(r), pids[r] != 0 ? ResidentBytes(pids[r]) : 0);
    }
  };
  std::atomic<bool> sampling{true};
  std::thread memory_sampler([&] {
    while (sampling.load()) {
      sample_memory();
      for (int i = 0; i < 20 && sampling.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  int exit_code = 0, restarts = 0;
  for (bool stop = false; !stop;) {
    auto [event, detail] = control.Next();
    switch (event) {
      case Event::kDrain:
        LOG(INFO) << "draining: no new requests";
        set_serving(false, "draining");
        scheduler.Drain(Clock::now());
        break;
      case Event::kWorkerDied: {
        LOG(ERROR) << "worker failure: " << detail;
        set_serving(false, "loading");
        scheduler.FailRunning(detail);
        supervisor.KillAll();
        for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "dead");
        if (policy == "restart" && restarts < absl::GetFlag(FLAGS_max_restarts)) {
          const int backoff_ms = 500 << restarts++;
          LOG(INFO) << "restarting the group in " << backoff_ms << " ms (restart " << restarts << ")";
          std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
          if (start_group() == 0) {
            set_serving(true, "ready");
            break;
          }
        }
        LOG(ERROR) << "giving up after a worker failure";
        exit_code = 4;
        stop = true;
        break;
      }
      case Event::kShutdown:
        stop = true;
        break;
    }
  }

  // Graceful stop: refuse new work, let in-flight requests finish until the deadline, cancel the
  // rest, stop the workers (killing stragglers), then the server.
  set_serving(false, "stopping");
  const auto deadline = Clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  if (!scheduler.Drain(deadline)) {
    LOG(WARNING) << "drain deadline passed; cancelling what remains";
    scheduler.CancelAll("drain");
    scheduler.Drain(Clock::now() + std::chrono::seconds(5));
  }
  supervisor.Stop(absl::Seconds(5));
  sampling.store(false);
  memory_sampler.join();
  sample_memory();
  for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "stopped");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  scheduler.Stop();
  std::filesystem::remove_all(run_dir);
  LOG(INFO) << "stopped (exit code " << exit_code << ")";
  return exit_code;
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The q38 coordinator: q38-server --model DIR [--tp N] [--listen ADDR]");
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return q38::Run();
}
