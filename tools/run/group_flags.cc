#include "tools/run/group_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, gpus, "", "with --device cuda: comma-separated GPU per rank (default: rank r on GPU r)");
ABSL_FLAG(std::string, cpu_comm, "inprocess",
          "CPU ranks: inprocess (threads at a barrier), shm (a shared-memory segment, as the server's worker processes "
          "meet by default) or gloo (loopback TCP)");
ABSL_FLAG(std::string, cpu_math, "fast", "CPU ranks' arithmetic: fast (FP32 SIMD, as the server's workers) or exact (the reference)");
ABSL_FLAG(int32_t, cpu_threads, 0, "threads of each fast CPU rank (0: this host's cores shared out over the ranks)");
ABSL_FLAG(bool, decode_graph, true, "replay each decode step as a recorded graph (CUDA graphs on GPUs)");
ABSL_FLAG(std::string, cuda_grid_kernels, "all",
          "CUDA ranks' decode kernels with grid-wide barriers: all (the indexer's selection at long context) or none");
ABSL_FLAG(bool, processes, false,
          "ranks 1.. in processes of their own, as the server's workers (CUDA ranks sharing a GPU need it; with "
          "--device cuda one TP size a run)");

namespace q38 {

absl::StatusOr<LocalGroupOptions> LocalGroupOptionsFromFlags() {
  LocalGroupOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  if (o.device != "cpu" && o.device != "cuda") return absl::InvalidArgumentError("--device: expected cpu or cuda");
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_gpus), ',', absl::SkipWhitespace())) {
    int g;
    if (!absl::SimpleAtoi(part, &g) || g < 0) return absl::InvalidArgumentError("--gpus: not a GPU index: " + std::string(part));
    o.gpus.push_back(g);
  }
  o.cpu_comm = absl::GetFlag(FLAGS_cpu_comm);
  ASSIGN_OR_RETURN(o.cpu_math, ParseCpuMath(absl::GetFlag(FLAGS_cpu_math)));
  o.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  if (o.cpu_threads < 0) return absl::InvalidArgumentError("--cpu_threads: expected 0 (automatic) or more");
  o.model.decode_graph = absl::GetFlag(FLAGS_decode_graph);
  o.cuda_grid_kernels = absl::GetFlag(FLAGS_cuda_grid_kernels);
  o.processes = absl::GetFlag(FLAGS_processes);
  return o;
}

}  // namespace q38
