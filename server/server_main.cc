// q38-server: the coordinator (server/coordinator.h). This file reads the flags, checks their
// form, turns SIGTERM and SIGINT into a shutdown and runs the coordinator; its exit code is the
// coordinator's (common/exit_codes.h).
#include <signal.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/exit_codes.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel ranks, one worker process each");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, gpus, "",
          "GPU indices for --device cuda, one per rank (e.g. 0,1,2,3; default 0..tp-1); an index may repeat (0,0,0,0): "
          "ranks that share a GPU are joined by CUDA IPC");
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
ABSL_FLAG(std::string, cuda_grid_kernels, "all",
          "GPU workers' decode kernels with grid-wide barriers: all (the indexer's selection at long context) or none");
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

// The flags as options, or INVALID_ARGUMENT saying which flag is wrong (exit kExitBadFlags).
absl::StatusOr<CoordinatorOptions> OptionsFromFlags() {
  CoordinatorOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.tp = absl::GetFlag(FLAGS_tp);
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (o.tp < 1) return absl::InvalidArgumentError("--tp must be at least 1");
  o.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (o.prefill_chunk < 1) return absl::InvalidArgumentError("--prefill_chunk must be at least 1");
  o.step_timeout_s = absl::GetFlag(FLAGS_step_timeout_s);
  if (o.step_timeout_s < 1) return absl::InvalidArgumentError("--step_timeout_s must be at least 1");
  const std::string policy = absl::GetFlag(FLAGS_restart_policy);
  if (policy != "exit" && policy != "restart") return absl::InvalidArgumentError("--restart_policy must be exit or restart");
  o.restart_on_failure = policy == "restart";
  o.device = absl::GetFlag(FLAGS_device);
  if (o.device != "cpu" && o.device != "cuda") return absl::InvalidArgumentError("--device must be cpu or cuda");
  ASSIGN_OR_RETURN(o.gpus, ParseGpus(absl::GetFlag(FLAGS_gpus), o.tp));
  o.bundle = absl::GetFlag(FLAGS_bundle);
  o.source = absl::GetFlag(FLAGS_source);
  if (!o.source.empty() && o.bundle.empty()) return absl::InvalidArgumentError("--source goes with --bundle");
  o.access = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_api_key_file),
              absl::GetFlag(FLAGS_admin_key_file), absl::GetFlag(FLAGS_loopback_is_admin)};
  o.listen = absl::GetFlag(FLAGS_listen);
  o.http = absl::GetFlag(FLAGS_http);
  const bool secured = !o.access.tls_cert.empty() && !o.access.api_key_file.empty();
  for (const auto& [flag, address] : {std::pair<const char*, std::string>{"--listen", o.listen}, {"--http", o.http}}) {
    if (!address.empty() && !IsLoopbackAddress(address) && !secured && !absl::GetFlag(FLAGS_allow_insecure_public)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", address, " is not loopback: give --tls_cert, --tls_key and ",
                                                     "--api_key_file, or --allow_insecure_public"));
    }
  }
  if (const std::string file = absl::GetFlag(FLAGS_contract); !file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(file);
    absl::StatusOr<Contract> parsed = text.ok() ? ParseContract(*text) : text.status();
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--contract ", file, ": ", parsed.status().ToString()));
    o.contract = *std::move(parsed);
  }
  o.worker_env = absl::GetFlag(FLAGS_worker_env);
  for (const std::string& kv : o.worker_env) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return absl::InvalidArgumentError("--worker_env: '" + kv + "' is not KEY=VALUE");
    }
  }
  o.decode_graph = absl::GetFlag(FLAGS_decode_graph);
  o.metrics = absl::GetFlag(FLAGS_metrics);
  o.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  o.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  o.queue_size = absl::GetFlag(FLAGS_queue_size);
  o.drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.startup_timeout_s = absl::GetFlag(FLAGS_startup_timeout_s);
  o.comm_timeout_ms = absl::GetFlag(FLAGS_comm_timeout_ms);
  o.cpu_comm = absl::GetFlag(FLAGS_cpu_comm);
  o.cpu_math = absl::GetFlag(FLAGS_cpu_math);
  o.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  o.cuda_grid_kernels = absl::GetFlag(FLAGS_cuda_grid_kernels);
  o.max_context = absl::GetFlag(FLAGS_max_context);
  o.run_dir = absl::GetFlag(FLAGS_run_dir);
  o.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  o.ready_file = absl::GetFlag(FLAGS_ready_file);
  o.chat_special_tokens_in_content = absl::GetFlag(FLAGS_chat_special_tokens_in_content);
  o.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  return o;
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The q38 coordinator: q38-server --model DIR [--tp N] [--listen ADDR]");
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  absl::StatusOr<q38::CoordinatorOptions> options = q38::OptionsFromFlags();
  if (!options.ok()) {
    LOG(ERROR) << options.status().message();
    return q38::kExitBadFlags;
  }
  // A client that hangs up mid-response must fail the write, not kill the server (HTTPS writes
  // through OpenSSL, which does not ask the kernel to spare the signal).
  signal(SIGPIPE, SIG_IGN);
  // Signals go to one thread that turns them into a shutdown (queued until the server serves).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  q38::Coordinator coordinator(*std::move(options));
  std::thread([&] {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      LOG(INFO) << "signal " << sig << " (" << strsignal(sig) << "): shutting down";
      coordinator.PostShutdown();
    }
  }).detach();
  return coordinator.Run();
}
