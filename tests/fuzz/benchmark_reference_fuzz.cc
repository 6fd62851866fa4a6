// The benchmark's reference report (BenchmarkRequest.reference_json) on arbitrary text, parsed as
// the Benchmark RPC parses it and read by ReferenceTokens as the benchmark reads it: ids or
// InvalidArgument, never an exception (one thrown in the server's handler ends the server).
#include <cstdint>

#include "nlohmann/json.hpp"
#include "server/benchmark.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json report = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) return 0;
  // An exception escaping here aborts, which libFuzzer reports as a crash.
  for (const char* name : {"fixed_64", "fixed_1024"}) {
    auto ids = q38::ReferenceTokens(report, name);
    if (!ids.ok() && !absl::IsInvalidArgument(ids.status())) __builtin_trap();
  }
  return 0;
}
