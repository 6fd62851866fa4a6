// The collective bench: latency of the CUDA IPC all-reduce, one-shot and two-shot, from 1 KB to
// 64 MB, for ranks as processes (the server's shape: handles exchanged through shared memory) and
// as threads of one process (one CUDA context, so the kernels of all ranks run at once, as they do
// on separate GPUs), and NCCL's where every rank has a GPU of its own. Each figure is the median
// over repeats of a replayed CUDA graph of back-to-back all-reduces (as the decode graph holds
// them), wall time over the calls, every rank starting together. Each size's sum is checked.
// Usage: comm_bench [--world 2,4] [--modes processes,threads] [--repeats 5] [--max_bytes N]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "worker/comm/communicator.h"
#include "worker/comm/cuda_group.h"

ABSL_FLAG(std::string, world, "2,4", "comma-separated group sizes");
ABSL_FLAG(std::string, modes, "processes,threads", "ranks as processes, as threads of one process, or both");
ABSL_FLAG(int32_t, repeats, 5, "timed replays of each graph");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20, "the largest message");

namespace q38 {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> Sizes() {
  std::vector<int64_t> s = {1 << 10, 5120, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  s.erase(std::remove_if(s.begin(), s.end(), [](int64_t b) { return b > absl::GetFlag(FLAGS_max_bytes); }), s.end());
  return s;
}

// A group's way of making its host members: shared memory between processes, or in-process.
using HostFactory = std::function<std::unique_ptr<Communicator>(const std::string& prefix)>;

struct Row {
  int64_t bytes = 0;
  double us[3] = {-1, -1, -1};  // one-shot, two-shot, NCCL
};

// Median µs per all-reduce of `comm` over a graph of `calls` back-to-back sums of `bytes` (F16);
// -1 when the sum was wrong.
double Time(Communicator& comm, Communicator& host, cudaStream_t stream, int64_t bytes, int calls) {
  const int64_t n = bytes / 2;
  const int r = comm.rank(), world = comm.size();
  // Small integers, exact in FP16 however they are summed: rank r holds (r + 1) · (i % 7).
  // Threads of one process share the GPU's context: device-wide calls only while every rank is
  // idle and waiting here, before and after.
  auto quiet = [&] {
    char b = 0;
    return cudaStreamSynchronize(stream) == cudaSuccess && host.Broadcast(&b, 1, 0).ok();
  };
  // Pinned host memory: a pageable copy may be staged in a way that waits on another rank's kernel.
  void* d = nullptr;
  uint16_t* h = nullptr;
  quiet();
  if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMallocHost(&h, bytes) != cudaSuccess) return -1;
  quiet();
  for (int64_t i = 0; i < n; ++i) h[i] = FloatToFp16(static_cast<float>((r + 1) * (i % 7)));
  Tensor t{d, DType::kF16, {n}};
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  for (int c = 0; c < calls; ++c) {
    if (!comm.AllReduceSum(t).ok()) break;
  }
  cudaStreamEndCapture(stream, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  quiet();
  // The sum of one call first (the graph's first call sums the inputs; later ones sum sums).
  cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream);
  bool right = comm.AllReduceSum(t).ok() && cudaStreamSynchronize(stream) == cudaSuccess;
  cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  const float ranks = world * (world + 1) / 2.0f;
  for (int64_t i = 0; right && i < n; ++i) right = Fp16ToFloat(h[i]) == ranks * (i % 7);
  std::vector<double> us;
  for (int k = 0; k < absl::GetFlag(FLAGS_repeats) + 1; ++k) {
    cudaMemsetAsync(d, 0, bytes, stream);
    if (!quiet()) right = false;  // every rank starts together
    const auto start = Clock::now();
    cudaGraphLaunch(exec, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) right = false;
    if (k > 0) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls);
  }
  quiet();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d);
  cudaFreeHost(h);
  quiet();
  if (!right) std::fprintf(stderr, "rank %d: the sum of %lld bytes is wrong or did not finish\n", r, static_cast<long long>(bytes));
  std::sort(us.begin(), us.end());
  return right ? us[us.size() / 2] : -1;
}

// One rank's part of a group's bench; rank 0's rows come back.
std::vector<Row> RankBench(int rank, int world, int gpu, bool nccl, const HostFactory& host_for,
                           const std::string& store) {
  std::vector<Row> rows;
  if (const cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess) {
    std::fprintf(stderr, "rank %d: GPU %d: %s\n", rank, gpu, cudaGetErrorString(e));
    return rows;
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto connect = [&](const std::string& name, const std::string& route, size_t two_shot) {
    return ConnectCudaGroup(host_for(name + ".host"), {.store_dir = store, .prefix = name, .timeout_ms = 60000,
                                                       .stream = stream, .route = route,
                                                       .two_shot_bytes = two_shot, .threads_share_gpu = true});
  };
  auto one = connect("one", "ipc", std::numeric_limits<size_t>::max());
  auto two = connect("two", "ipc", 0);
  absl::StatusOr<std::unique_ptr<Communicator>> via_nccl = absl::UnavailableError("not asked");
  if (nccl) via_nccl = connect("nccl", "nccl", 0);
  auto barrier = host_for("barrier");
  if (nccl && !via_nccl.ok()) std::fprintf(stderr, "rank %d: nccl: %s\n", rank, std::string(via_nccl.status().message()).c_str());
  if (!one.ok() || !two.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string((one.ok() ? two : one).status().message()).c_str());
    return rows;
  }
  if (rank == 0) std::printf("route: %s\n", (*one)->version().c_str());
  for (int64_t bytes : Sizes()) {
    Row row{bytes};
    const int calls = bytes <= (1 << 20) ? 50 : 5;
    row.us[0] = Time(**one, *barrier, stream, bytes, calls);
    row.us[1] = Time(**two, *barrier, stream, bytes, calls);
    if (via_nccl.ok()) row.us[2] = Time(**via_nccl, *barrier, stream, bytes, calls);
    rows.push_back(row);
  }
  one->reset();
  two->reset();
  cudaStreamDestroy(stream);
  return rows;
}

void Print(const std::string& what, const std::vector<Row>& rows) {
  std::printf("%s\n| bytes | one-shot µs | two-shot µs | NCCL µs | best bus GB/s |\n|---|---|---|---|---|\n",
              what.c_str());
  auto cell = [](double us) { return us < 0 ? std::string("—") : absl::StrCat(static_cast<int64_t>(us * 10) / 10.0); };
  for (const Row& r : rows) {
    double best = std::numeric_limits<double>::max();
    for (double us : r.us) {
      if (us > 0) best = std::min(best, us);
    }
    std::printf("| %lld | %s | %s | %s | %.1f |\n", static_cast<long long>(r.bytes), cell(r.us[0]).c_str(),
                cell(r.us[1]).c_str(), cell(r.us[2]).c_str(), r.bytes / best / 1e3);
  }
  std::fflush(stdout);
}

int CountGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Ranks as processes, forked by a process that has not touched CUDA; returns the failures.
int ProcessGroup(int world, const std::string& dir) {
  std::vector<pid_t> kids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int gpus = CountGpus();
      if (gpus == 0) _exit(3);
      const bool own = gpus >= world;
      std::vector<Row> rows = RankBench(r, world, own ? r : 0, own, [&](const std::string& prefix) {
        auto host = ConnectSharedMemory({.rank = r, .size = world, .store_dir = dir, .prefix = prefix,
                                         .timeout_ms = 60000, .slot_bytes = 4096});
        if (!host.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, std::string(host.status().message()).c_str());
          _exit(4);
        }
        return std::move(*host);
      }, dir);
      if (r == 0) Print(absl::StrCat("world ", world, ", ranks as processes", own ? ", a GPU each" : " on one GPU"), rows);
      bool ok = !rows.empty();
      for (const Row& row : rows) ok = ok && row.us[0] > 0 && row.us[1] > 0;
      _exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      std::fprintf(stderr, "world %d: rank process %d %s %d\n", world, k, WIFEXITED(status) ? "exited with" : "died of signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    failed += !ok;
  }
  return failed;
}

int ThreadGroup(int world, const std::string& dir) {
  std::vector<std::unique_ptr<Communicator>> hosts[4];
  const char* names[4] = {"one.host", "two.host", "nccl.host", "barrier"};
  for (auto& h : hosts) h = MakeInProcessGroup(world);
  const int gpus = CountGpus();
  if (gpus == 0) return 1;
  const bool own = gpus >= world;
  std::vector<std::vector<Row>> rows(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      rows[r] = RankBench(r, world, own ? r : 0, own, [&](const std::string& prefix) {
        for (int k = 0; k < 4; ++k) {
          if (prefix == names[k]) return std::move(hosts[k][r]);
        }
        return std::unique_ptr<Communicator>();
      }, dir);
    });
  }
  for (auto& t : threads) t.join();
  Print(absl::StrCat("world ", world, ", ranks as threads of one process", own ? ", a GPU each" : " on one GPU"), rows[0]);
  int failed = 0;
  for (const auto& rs : rows) {
    failed += rs.empty();
    for (const Row& row : rs) failed += row.us[0] < 0 || row.us[1] < 0;
  }
  return failed;
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int failed = 0;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_world), ',')) {
    int world = 0;
    if (!absl::SimpleAtoi(w, &world) || world < 2) {
      std::fprintf(stderr, "--world: not a group size: %s\n", std::string(w).c_str());
      return 2;
    }
    for (absl::string_view mode : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',')) {
      std::string dir = (std::filesystem::temp_directory_path() / "q38-comm-bench-XXXXXX").string();
      if (mkdtemp(dir.data()) == nullptr) return 2;
      // Each group in a child of its own: CUDA does not survive a fork, so this process never starts it.
      const pid_t child = fork();
      if (child == 0) {
        std::fflush(stdout);
        _exit(std::min(mode == "processes" ? q38::ProcessGroup(world, dir) : q38::ThreadGroup(world, dir), 100));
      }
      int status = 0;
      waitpid(child, &status, 0);
      std::filesystem::remove_all(dir);
      failed += WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
  }
  std::printf(failed == 0 ? "comm_bench: every sum checked\n" : "comm_bench: MISMATCH or failure (%d)\n", failed);
  return failed == 0 ? 0 : 1;
}
