#include "server/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

extern char** environ;

namespace q38 {
namespace {

// `base` (KEY=VALUE entries) with `overrides` set over it.
std::vector<std::string> MergeEnv(char** base, const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  auto key = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = base; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (std::none_of(overrides.begin(), overrides.end(), [&](const std::string& o) { return key(o) == key(kv); })) out.push_back(kv);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return absl::StrCat("exited with code ", WEXITSTATUS(status));
}

}  // namespace

Supervisor::Supervisor(SupervisorOptions options, DeathCallback on_death)
    : options_(std::move(options)), on_death_(std::move(on_death)) {}

Supervisor::~Supervisor() { KillAll(); }

std::vector<pid_t> Supervisor::pids() const {
  std::lock_guard<std::mutex> l(mu_);
  return pids_;
}

absl::Status Supervisor::Spawn(int rank, const std::string& rendezvous) {
  int pipefd[2];
  if (pipe_write_ < 0) {
    if (pipe2(pipefd, O_CLOEXEC) != 0) return absl::InternalError("pipe: " + std::string(strerror(errno)));
    pipe_write_ = pipefd[1];
    pipe_read_ = pipefd[0];
  }
  const std::string socket = absl::StrCat(options_.run_dir, "/rank", rank, ".sock");
  std::filesystem::remove(socket);
  std::vector<std::string> args = {
      options_.worker_binary,
      absl::StrCat("--rank=", rank),
      absl::StrCat("--world=", options_.tp),
      "--model=" + options_.model,
      "--device=" + options_.device,
      absl::StrCat("--gpu=", options_.gpus.empty() ? rank : options_.gpus[rank]),
      absl::StrCat("--decode_graph=", options_.decode_graph ? "true" : "false"),
      "--socket=" + socket,
      "--rendezvous=" + rendezvous,
      absl::StrCat("--group=g", generation_),
      absl::StrCat("--comm_timeout_ms=", options_.comm_timeout_ms),
      "--cpu_comm=" + options_.cpu_comm,
      "--cpu_math=" + options_.cpu_math,
      absl::StrCat("--cpu_threads=", options_.cpu_threads),
      "--cuda_grid_kernels=" + options_.cuda_grid_kernels,
      absl::StrCat("--heartbeat_ms=", options_.heartbeat_ms),
      absl::StrCat("--max_context=", options_.max_context),
      absl::StrCat("--prefill_chunk=", options_.prefill_chunk),
      absl::StrCat("--parent_pid=", getpid()),
      absl::StrCat("--parent_pipe_fd=", pipe_read_),
  };
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = MergeEnv(environ, options_.env);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kWorkerExitParentGone);
    fcntl(pipe_read_, F_SETFD, 0);  // the read end survives exec; the write end does not
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  std::lock_guard<std::mutex> l(mu_);
  pids_[rank] = pid;
  return absl::OkStatus();
}

absl::Status Supervisor::Start(absl::Duration deadline) {
  KillAll();
  // The last group's rendezvous (a shared-memory segment its ranks were killed before removing).
  if (generation_ > 0) {
    std::error_code ec;
    std::filesystem::remove_all(absl::StrCat(options_.run_dir, "/rendezvous-", generation_), ec);
  }
  ++generation_;
  const std::string rendezvous = absl::StrCat(options_.run_dir, "/rendezvous-", generation_);
  std::filesystem::create_directories(rendezvous);
  {
    std::lock_guard<std::mutex> l(mu_);
    pids_.assign(options_.tp, 0);
    exit_status_.assign(options_.tp, 0);
    stopping_ = false;
  }
  for (int r = 0; r < options_.tp; ++r) {
    if (absl::Status s = Spawn(r, rendezvous); !s.ok()) return s;
  }
  reaper_ = std::thread([this] { Reap(); });
  stubs_.clear();
  infos_.assign(options_.tp, {});
  for (int r = 0; r < options_.tp; ++r) {
    const std::string socket = absl::StrCat("unix:", options_.run_dir, "/rank", r, ".sock");
    // Workers appear within seconds: retry connecting quickly rather than with gRPC's default backoff.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    auto channel = grpc::CreateCustomChannel(socket, grpc::InsecureChannelCredentials(), args);
    stubs_.push_back(worker::v1::Worker::NewStub(channel));
    // Each phase (answering, connecting, loading) has the whole deadline to itself, and the
    // error names the phase a rank was stuck in.
    std::string phase = "starting";
    int loaded = -1;
    absl::Time phase_since = absl::Now();
    for (;;) {
      if (absl::Status s = StartupExit(phase); !s.ok()) return s;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      worker::v1::GetInfoRequest req;
      grpc::Status s = stubs_[r]->GetInfo(&ctx, req, &infos_[r]);
      if (s.ok() && infos_[r].phase() != phase) {
        phase = infos_[r].phase();
        phase_since = absl::Now();
        LOG(INFO) << "rank " << r << ": " << phase;
      }
      if (s.ok() && phase == "ready") break;
      if (s.ok() && phase == "loading" && infos_[r].layers_loaded() != loaded) {
        loaded = infos_[r].layers_loaded();
        if (progress_) progress_(r, loaded, infos_[r].layers_total());
      }
      if (absl::Now() - phase_since > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("rank ", r, " stuck in phase '", phase, "' for ",
                                                        absl::FormatDuration(deadline)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    LOG(INFO) << "rank " << r << " ready: pid " << infos_[r].manifest().pid() << ", " << infos_[r].manifest().communicator();
  }
  return absl::OkStatus();
}

absl::Status Supervisor::StartupExit(const std::string& phase) const {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] != 0) continue;
    const int status = exit_status_[r];
    if (WIFEXITED(status) && WEXITSTATUS(status) == kWorkerExitModelRefused) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, " refused the checkpoint (its log says why)"));
    }
    return absl::UnavailableError(absl::StrCat("rank ", r, " ", DescribeExit(status), " during startup (", phase, ")"));
  }
  return absl::OkStatus();
}

absl::Status Supervisor::RefreshManifests(absl::Duration timeout) {
  std::vector<worker::v1::WorkerInfo> fresh(stubs_.size());
  for (size_t r = 0; r < stubs_.size(); ++r) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
    worker::v1::GetInfoRequest req;
    req.set_refresh_manifest(true);
    if (grpc::Status s = stubs_[r]->GetInfo(&ctx, req, &fresh[r]); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("rank ", r, " did not send its manifest: ", s.error_message()));
    }
  }
  infos_ = std::move(fresh);
  return absl::OkStatus();
}

void Supervisor::Reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return;  // no children left
    }
    int rank = -1;
    bool expected;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (pids_[r] == pid) {
          rank = static_cast<int>(r);
          pids_[r] = 0;
          exit_status_[r] = status;
        }
      }
      expected = stopping_;
    }
    if (rank < 0) continue;
    const std::string how = DescribeExit(status);
    if (expected) {
      LOG(INFO) << "rank " << rank << " (pid " << pid << ") " << how;
    } else {
      LOG(ERROR) << "rank " << rank << " (pid " << pid << ") " << how;
      on_death_(rank, how, generation_);
    }
  }
}

void Supervisor::Stop(absl::Duration grace) {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  for (size_t r = 0; r < stubs_.size(); ++r) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    worker::v1::ShutdownResponse resp;
    stubs_[r]->Shutdown(&ctx, {}, &resp);
  }
  const absl::Time until = absl::Now() + grace;
  while (absl::Now() < until) {
    bool any = false;
    for (pid_t p : pids()) any |= p != 0;
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t r = 0; r < pids().size(); ++r) {
    if (pids()[r] != 0) LOG(WARNING) << "rank " << r << " did not exit within " << absl::FormatDuration(grace) << "; killing it";
  }
  KillAll();
}

void Supervisor::KillAll() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (pid_t p : pids_) {
      if (p != 0) kill(p, SIGKILL);
    }
  }
  if (reaper_.joinable()) reaper_.join();  // returns once every child is reaped
}

}  // namespace q38
