// `q38 bench --contract`: the server's Benchmark RPC (docs/benchmark.md). The report streamed after
// every step is saved atomically each time, so an interrupted run leaves its last consistent
// report (complete false); the table summarises the final one.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "nlohmann/json.hpp"

namespace q38::client {

struct ContractBenchOptions {
  std::string contract_json;   // the contract file's text
  int repeats = 0;             // 0: the contract's default
  std::string reference_json;  // optional
  std::string report_path;     // optional: saved after every step
  std::optional<std::chrono::duration<double>> timeout;
};

struct ContractBenchResult {
  absl::Status status;    // the benchmark's verdict (the RPC's status)
  nlohmann::json report;  // the last report received; null when none came
};

// `progress` is told each step's name. An error saving the report ends the run with it.
ContractBenchResult RunContractBench(Client& client, const ContractBenchOptions& options,
                                     const std::function<void(const std::string&)>& progress);

// Health verdicts and one row per case: decode and prefill tok/s, TPOT, TTFT (mean, min-max),
// repeatability and the reference verdict; then the error, if any.
std::string FormatContractReport(const nlohmann::json& report);

}  // namespace q38::client
