// The baseline contract (docs/contract.md §2, docs/benchmark.md): a checked-in file (deploy/contracts/)
// naming the model, TP, device, dtypes, graph mode, limits and excluded routes a run must have,
// and the benchmark it runs. Serving or benchmarking under a contract fails closed: every field a
// worker manifest deviates in is named.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "q38/v1/q38.pb.h"

namespace q38 {

struct ContractBenchmark {
  std::vector<int64_t> prompt_lengths;  // one fixed-prompt case each
  int32_t max_tokens = 513;             // greedy tokens per timed request, EOS ignored
  int32_t repeats = 3;                  // default timed repeats (at least 2)
  std::vector<std::string> health_checks;  // arithmetic, record_copy
  bool long_context = false;  // a case at max_context - max_tokens, the middle-record check, the boundary
};

struct Contract {
  std::string name;
  std::string sha256;  // of the file's text
  std::string model_type;
  std::string experts;  // nvfp4, bf16
  bool synthetic = false;
  int tp = 0;
  std::string device;  // cpu, cuda
  std::string activation, kv_cache, gdn_state, conv_state;  // common/dtype names
  std::string graph_mode;
  int64_t max_context = 0;
  int64_t prefill_chunk = 0;
  int max_num_seqs = 1;
  bool mtp = false;
  bool prefix_cache = false;
  std::vector<std::string> approximate_routes;  // usually none
  std::optional<std::vector<std::string>> routes;  // when given, exactly these
  ContractBenchmark benchmark;
};

inline constexpr char kHealthArithmetic[] = "arithmetic";
inline constexpr char kHealthRecordCopy[] = "record_copy";

// Strict: unknown, missing or mistyped fields are InvalidArgument naming the field.
absl::StatusOr<Contract> ParseContract(const std::string& text);

// Every field of `manifest` that deviates from `contract`, e.g.
// "workers[rank=1].dtypes.kv_cache: contract F16, rank 1 has F32". Empty when it conforms.
std::vector<std::string> ContractDifferences(const Contract& contract, const v1::Manifest& manifest);

// FailedPrecondition listing every difference; OK when there is none.
absl::Status CheckContract(const Contract& contract, const v1::Manifest& manifest);

}  // namespace q38
