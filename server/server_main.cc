// q38-server: the coordinator. Verifies its bundle (when given one) before spawning anything,
// spawns one q38-worker per rank, checks that they form one build of one model (and the bundle's
// libraries, and the contract), serves the gRPC API, the HTTP API (--http) and /metrics, and on SIGTERM, SIGINT or
// Admin.Shutdown drains and gives everything back. Exit codes: common/exit_codes.h.
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
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/exit_codes.h"
#include "common/sha256.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/mapped_objects.h"
#include "provenance/bundle.h"
#include "server/contract.h"
#include "server/group_check.h"
#include "server/http/http_front_end.h"
#include "server/run_dir.h"
#include "server/service.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel ranks, one worker process each");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, gpus, "", "GPU indices for --device cuda, one per rank (e.g. 0,1,2,3; default 0..tp-1)");
ABSL_FLAG(bool, decode_graph, true, "workers replay each decode step as a CUDA graph");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC address");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090", "Prometheus /metrics address; empty to disable");
ABSL_FLAG(std::string, http, "", "OpenAI-compatible HTTP address (docs/api.md), e.g. 127.0.0.1:8000; empty: off. HTTPS "
          "with --tls_cert; the API key and the non-loopback rule of --listen apply");
ABSL_FLAG(std::string, served_model_name, "", "the model id of the HTTP API (default: the --model directory's name)");
ABSL_FLAG(int32_t, queue_size, 16, "requests that may wait while one runs");
ABSL_FLAG(int32_t, drain_timeout_s, 30, "how long in-flight requests may finish on shutdown");
ABSL_FLAG(std::string, restart_policy, "exit", "when a worker dies: exit, or restart the group");
ABSL_FLAG(int32_t, max_restarts, 3, "restarts before giving up (restart policy)");
ABSL_FLAG(int32_t, startup_timeout_s, 120, "deadline for the workers to load and answer");
ABSL_FLAG(int32_t, comm_timeout_ms, 10000, "a collective stuck longer than this fails its request");
ABSL_FLAG(std::string, cpu_comm, "shm", "CPU workers meet over shm (shared memory: every worker on this host) or gloo (TCP)");
ABSL_FLAG(std::string, cpu_math, "fast", "CPU workers' arithmetic: fast (FP32 SIMD) or exact (the double-accumulating reference)");
ABSL_FLAG(int32_t, cpu_threads, 0, "threads per fast CPU worker (0: this host's cores shared out over the workers)");
ABSL_FLAG(int64_t, max_context, 4096, "longest sequence, prompt plus generated tokens");
ABSL_FLAG(int64_t, prefill_chunk, 8192, "prefill chunk in tokens");
ABSL_FLAG(std::string, run_dir, "", "directory for worker sockets and the rendezvous (default: a fresh one in /tmp)");
ABSL_FLAG(std::string, worker_binary, "", "q38-worker to spawn (default: beside this binary)");
ABSL_FLAG(std::string, ready_file, "", "once serving, write {grpc_port, metrics_port, pid} here as JSON");
ABSL_FLAG(std::string, bundle, "", "run from this verified bundle (q38 bundle create): refuse on any mismatch");
ABSL_FLAG(std::string, source, "", "with --bundle: also require this checkout's production tree to be the one built");
ABSL_FLAG(std::string, contract, "", "serve under this contract file (deploy/contracts/): refuse to start when a worker deviates");
ABSL_FLAG(std::vector<std::string>, worker_env, {}, "KEY=VALUE,... set in the workers' environment");
ABSL_FLAG(int32_t, step_timeout_s, 60, "a rank whose progress stands still this long while a request runs is stuck: "
          "the request fails and the group restarts by --restart_policy");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate: serve gRPC and /metrics over TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(std::string, api_key_file, "", "API keys, one per line: every public call must send one as \"authorization: Bearer KEY\" "
          "(health checks stay open)");
ABSL_FLAG(std::string, admin_key_file, "", "admin keys, one per line: Drain, Shutdown, Benchmark and the full manifest from "
          "peers other than loopback");
ABSL_FLAG(std::string, unix_socket, "", "also serve the API in plaintext on this Unix socket: local health checks and "
          "admin calls next to a TLS --listen");
ABSL_FLAG(bool, chat_special_tokens_in_content, false,
          "special tokens typed in chat messages become control tokens, as in transformers' apply_chat_template "
          "(off: only the chat template's own markers are control tokens)");
ABSL_FLAG(bool, loopback_is_admin, true, "peers on loopback may make admin calls without the admin key (turn off "
          "behind a reverse proxy on the same host)");
ABSL_FLAG(bool, allow_insecure_public, false, "serve on an address other than loopback without TLS and an API key");
ABSL_FLAG(int64_t, max_request_bytes, 0, "largest request accepted, checked before any parsing or tokenization "
          "(0: 32 bytes per token of --max_context, at least 1 MiB)");

namespace q38 {
namespace {

enum class Event { kShutdown, kDrain, kGroupFailed };

struct Posted {
  Event event;
  std::string detail;
  int generation = 0;  // kGroupFailed: the group it happened to (a restart makes older ones stale)
};

// Events for the control thread; signal handlers, RPCs, the reaper and the scheduler only post here.
class Control {
 public:
  void Post(Event e, std::string detail = "", int generation = 0) {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back({e, std::move(detail), generation});
    cv_.notify_all();
  }
  Posted Next() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !events_.empty(); });
    auto e = events_.front();
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Posted> events_;
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

// Loopback or a Unix socket: the address the defaults keep the server to.
bool IsLoopbackAddress(const std::string& address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "[::1]") ||
         absl::StartsWith(address, "localhost:") || absl::StartsWith(address, "unix:");
}

int Run() {
  const std::string model = absl::GetFlag(FLAGS_model), policy = absl::GetFlag(FLAGS_restart_policy);
  const std::string bundle_dir = absl::GetFlag(FLAGS_bundle);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (model.empty()) return LOG(ERROR) << "--model is required", kExitBadFlags;
  if (tp < 1) return LOG(ERROR) << "--tp must be at least 1", kExitBadFlags;
  if (absl::GetFlag(FLAGS_prefill_chunk) < 1) return LOG(ERROR) << "--prefill_chunk must be at least 1", kExitBadFlags;
  if (absl::GetFlag(FLAGS_step_timeout_s) < 1) return LOG(ERROR) << "--step_timeout_s must be at least 1", kExitBadFlags;
  if (policy != "exit" && policy != "restart") return LOG(ERROR) << "--restart_policy must be exit or restart", kExitBadFlags;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") return LOG(ERROR) << "--device must be cpu or cuda", kExitBadFlags;
  absl::StatusOr<std::vector<int>> gpus = ParseGpus(absl::GetFlag(FLAGS_gpus), tp);
  if (!gpus.ok()) return LOG(ERROR) << gpus.status(), kExitBadFlags;
  if (!absl::GetFlag(FLAGS_source).empty() && bundle_dir.empty()) return LOG(ERROR) << "--source goes with --bundle", kExitBadFlags;
  const bool secured = !absl::GetFlag(FLAGS_tls_cert).empty() && !absl::GetFlag(FLAGS_api_key_file).empty();
  for (const auto& [flag, address] : {std::pair<const char*, std::string>{"--listen", absl::GetFlag(FLAGS_listen)},
                                       {"--http", absl::GetFlag(FLAGS_http)}}) {
    if (!address.empty() && !IsLoopbackAddress(address) && !secured && !absl::GetFlag(FLAGS_allow_insecure_public)) {
      return LOG(ERROR) << flag << " " << address << " is not loopback: give --tls_cert, --tls_key and "
                        << "--api_key_file, or --allow_insecure_public",
             kExitBadFlags;
    }
  }
  std::optional<Contract> contract;
  if (const std::string file = absl::GetFlag(FLAGS_contract); !file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(file);
    absl::StatusOr<Contract> parsed = text.ok() ? ParseContract(*text) : text.status();
    if (!parsed.ok()) return LOG(ERROR) << "--contract " << file << ": " << parsed.status(), kExitBadFlags;
    contract = *std::move(parsed);
  }
  for (const std::string& kv : absl::GetFlag(FLAGS_worker_env)) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return LOG(ERROR) << "--worker_env: '" << kv << "' is not KEY=VALUE", kExitBadFlags;
    }
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model);
  if (!config.ok()) return LOG(ERROR) << config.status(), kExitModelRefused;
  absl::StatusOr<GenerationConfig> gen = LoadGenerationConfig(model);
  if (!gen.ok()) return LOG(ERROR) << gen.status(), kExitModelRefused;

  // The bundle is verified before anything is spawned.
  std::string worker = absl::GetFlag(FLAGS_worker_binary);
  Bundle bundle;
  if (!bundle_dir.empty()) {
    if (int code = VerifyStartingBundle(bundle_dir, bundle, worker)) return code;
  }

  // Signals go to one thread that turns them into events.
  // A client that hangs up mid-response must fail the write, not kill the server (HTTPS writes
  // through OpenSSL, which does not ask the kernel to spare the signal).
  signal(SIGPIPE, SIG_IGN);
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

  // Run directories of coordinators that were killed outright go first; this one goes on every way out.
  if (int stale = RemoveStaleRunDirs("/tmp"); stale > 0) LOG(INFO) << "removed " << stale << " stale run director(ies) in /tmp";
  absl::StatusOr<RunDir> run_dir = RunDir::Create(absl::GetFlag(FLAGS_run_dir));
  if (!run_dir.ok()) return LOG(ERROR) << run_dir.status(), kExitCannotServe;
  absl::StatusOr<Access> access = Access::Load({absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                                absl::GetFlag(FLAGS_api_key_file), absl::GetFlag(FLAGS_admin_key_file),
                                                absl::GetFlag(FLAGS_loopback_is_admin)});
  if (!access.ok()) return LOG(ERROR) << access.status(), kExitCannotServe;
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
    absl::StatusOr<int> port = metrics.Serve(absl::GetFlag(FLAGS_metrics), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key));
    if (!port.ok()) return LOG(ERROR) << port.status(), kExitCannotServe;
    metrics_port = *port;
    LOG(INFO) << "metrics on " << absl::GetFlag(FLAGS_metrics) << " (port " << *port << ")";
  }
  for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "starting");

  std::vector<std::string> worker_env = absl::GetFlag(FLAGS_worker_env);
  if (!bundle_dir.empty()) worker_env.insert(worker_env.begin(), "LD_LIBRARY_PATH=" + bundle.dir + "/lib");
  const std::chrono::milliseconds step_timeout(int64_t{absl::GetFlag(FLAGS_step_timeout_s)} * 1000);
  const int heartbeat_ms = static_cast<int>(std::clamp<int64_t>(step_timeout.count() / 4, 50, 1000));
  Supervisor supervisor({worker, model, device, *gpus, absl::GetFlag(FLAGS_decode_graph), run_dir->path(), tp, max_context,
                         absl::GetFlag(FLAGS_prefill_chunk), absl::GetFlag(FLAGS_comm_timeout_ms), heartbeat_ms, worker_env,
                         absl::GetFlag(FLAGS_cpu_comm), absl::GetFlag(FLAGS_cpu_math), absl::GetFlag(FLAGS_cpu_threads)},
                        [&](int rank, const std::string& how, int generation) {
                          control.Post(Event::kGroupFailed, absl::StrCat("rank ", rank, " ", how), generation);
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
    if (absl::Status s = CheckGroup(supervisor.infos(), tp); !s.ok()) return LOG(ERROR) << "refusing to serve: " << s, kExitGroupMismatch;
    if (!bundle_dir.empty()) {
      if (int code = Refused(CheckGroupAgainstBundle(supervisor.infos(), bundle))) return code;
    }
    if (contract) {
      if (absl::Status s = CheckContract(*contract, served_manifest()); !s.ok()) return LOG(ERROR) << "refusing to serve: " << s, kExitContract;
    }
    return 0;
  };
  auto start_group = [&]() -> int {
    metrics.SetServerState("loading");
    LOG(INFO) << "starting " << tp << " worker(s) of " << worker;
    if (absl::Status s = supervisor.Start(absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s))); !s.ok()) {
      LOG(ERROR) << "workers did not start: " << s;
      return absl::IsFailedPrecondition(s) ? kExitModelRefused : kExitWorkersNotStarted;
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
      return kExitModelRefused;
    }
    tokenizer = *std::move(t);
    if (tokenizer->vocab_size() > config->vocab_size) {
      LOG(ERROR) << "tokenizer has " << tokenizer->vocab_size() << " ids, the model " << config->vocab_size;
      supervisor.KillAll();
      return kExitModelRefused;
    }
  }
  ServiceInfo info;
  info.tokenizer = tokenizer.get();
  info.chat_special_tokens_in_content = absl::GetFlag(FLAGS_chat_special_tokens_in_content);
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

  Scheduler scheduler(supervisor, metrics,
                      {static_cast<size_t>(absl::GetFlag(FLAGS_queue_size)), step_timeout,
                       [&](const std::string& why, int generation) { control.Post(Event::kGroupFailed, why, generation); }});
  Generations generations(scheduler, metrics, info);
  Q38Service api(scheduler, metrics, *access, info, generations);
  AdminService admin([&] { control.Post(Event::kDrain); }, [&] { control.Post(Event::kShutdown); }, scheduler, *access);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), access->ServerCredentials(), &port);
  if (const std::string socket = absl::GetFlag(FLAGS_unix_socket); !socket.empty()) {
    std::filesystem::remove(socket);  // a socket left by a killed server
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  }
  // Oversized requests are refused by their length, before they are buffered, parsed or tokenized.
  int64_t max_request = absl::GetFlag(FLAGS_max_request_bytes);
  if (max_request <= 0) max_request = std::max<int64_t>(int64_t{1} << 20, 32 * max_context);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_request, INT32_MAX)));
  // The size check sees a message only once it has arrived: a memory quota over every connection's
  // buffers keeps many large requests at once from being buffered in full first.
  grpc::ResourceQuota quota("q38-server");
  quota.Resize(static_cast<size_t>(std::max<int64_t>(32 << 20, 4 * max_request)));
  builder.SetResourceQuota(quota);
  builder.RegisterService(&api);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    supervisor.Stop(absl::Seconds(5));
    return kExitCannotServe;
  }
  std::unique_ptr<http::HttpFrontEnd> http_api;
  if (const std::string address = absl::GetFlag(FLAGS_http); !address.empty()) {
    std::string name = absl::GetFlag(FLAGS_served_model_name);
    if (name.empty()) name = std::filesystem::path(model).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(model).lexically_normal().parent_path().filename().string();
    absl::StatusOr<std::unique_ptr<http::HttpFrontEnd>> started = http::HttpFrontEnd::Start(
        {address, name, max_request, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
         absl::GetFlag(FLAGS_queue_size) + 16},
        generations, *access, info);
    if (!started.ok()) {
      LOG(ERROR) << started.status();
      server->Shutdown();
      supervisor.Stop(absl::Seconds(5));
      return kExitCannotServe;
    }
    http_api = *std::move(started);
    LOG(INFO) << "serving the HTTP API on port " << http_api->port() << " as model \"" << name << "\"";
  }
  auto* health = server->GetHealthCheckService();
  // Health, state and gauges; admission is the scheduler's (drain, and the queue that waits out a restart).
  auto set_serving = [&](bool up, const std::string& state) {
    health->SetServingStatus("q38.v1.Q38", up);
    if (http_api) http_api->SetServing(up);
    api.SetState(state);
    metrics.SetServerState(state);
  };
  scheduler.SetAvailable(true);
  set_serving(true, "ready");
  int exit_code = 0, restarts = 0;
  LOG(INFO) << "serving on port " << port << " (" << absl::GetFlag(FLAGS_listen) << "), TP " << tp
            << (access->tls() ? ", TLS" : "") << (access->requires_api_key() ? ", API key required" : "");
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file); !ready.empty()) {
    const std::string tmp = ready + ".tmp";
    std::ofstream(tmp) << absl::StrCat("{\"grpc_port\": ", port, ", \"metrics_port\": ", metrics_port,
                                       ", \"http_port\": ", http_api ? http_api->port() : 0, ", \"pid\": ", getpid(), "}\n");
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
  // A failed group (a rank died, hung or failed a request) is restarted while the policy and the
  // restarts left allow; requests wait in the queue meanwhile and run on the new group. A drain
  // stays a drain across restarts.
  auto restart_group = [&](const std::string& detail) -> bool {
    LOG(ERROR) << "worker failure: " << detail;
    scheduler.Pause();
    set_serving(false, "loading");
    scheduler.FailRunning(detail);
    supervisor.KillAll();
    for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "dead");
    while (policy == "restart" && restarts < absl::GetFlag(FLAGS_max_restarts)) {
      const int backoff_ms = 500 << restarts++;
      LOG(INFO) << "restarting the group in " << backoff_ms << " ms (restart " << restarts << ")";
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      if (start_group() == 0) {
        const bool draining = scheduler.draining();
        set_serving(!draining, draining ? "draining" : "ready");
        scheduler.Resume();
        return true;
      }
      supervisor.KillAll();
    }
    LOG(ERROR) << "giving up after a worker failure";
    scheduler.SetAvailable(false);
    scheduler.FailQueued(absl::UnavailableError("the server's workers failed and could not be restarted; the server is stopping"));
    return false;
  };
  for (bool stop = false; !stop;) {
    Posted e = control.Next();
    switch (e.event) {
      case Event::kDrain:
        LOG(INFO) << "draining: no new requests";
        set_serving(false, "draining");
        scheduler.Drain(Clock::now());
        break;
      case Event::kGroupFailed:
        if (e.generation != supervisor.generation()) {
          LOG(INFO) << "already restarted past: " << e.detail;
          break;
        }
        if (!restart_group(e.detail)) {
          exit_code = kExitWorkerFailed;
          stop = true;
        }
        break;
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
    scheduler.CancelAll(worker::v1::CANCEL_REASON_DRAIN);
    scheduler.Drain(Clock::now() + std::chrono::seconds(5));
  }
  supervisor.Stop(absl::Seconds(5));
  sampling.store(false);
  memory_sampler.join();
  sample_memory();
  for (int r = 0; r < tp; ++r) metrics.SetWorkerState(r, "stopped");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http_api.reset();
  scheduler.Stop();
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
