// The `q38` command line as a library: subcommands run on already-parsed arguments and write to
// the given streams, so that tests drive them without spawning processes. q38_main.cc only
// declares the Abseil flags and copies them into CliArgs.
//
// Exit codes: 0 success; 1 not serving (health) or manifests differ (manifest --diff); 64 a usage
// error; 20-26 a bundle refused (bundle verify; provenance/bundle.h); otherwise the absl/gRPC status
// code (1–16) of the failure, e.g. 14 UNAVAILABLE.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "q38/v1/q38.pb.h"

namespace q38::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 64;

// One field per flag. A flag is "given" when its optional holds a value or its bool is true.
struct CliArgs {
  std::optional<std::string> server;
  ConnectOptions connect;  // TLS and the API key (--tls_ca, --tls_server_name, --api_key_file)
  std::optional<std::string> tokens;          // "1,2,3"
  std::optional<std::string> text;
  std::optional<int> max_tokens;
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::optional<std::string> stop_token_ids;  // "1,2"
  std::optional<int> logprobs;                // generate, bench: each token's logprob and N alternatives
  bool json = false;
  std::optional<double> timeout_s;
  bool diff = false;
  std::optional<std::string> ignore_fields;   // manifest --diff; default "workers.pid"
  std::optional<int> prompt_len;
  std::optional<int> vocab;
  std::optional<int> requests;
  std::optional<int> warmup;
  std::optional<std::string> tokenizer;  // bench: build the contract's fixed prompt with it
  std::optional<std::string> sentence;   // bench: the fixed prompt's sentence
  std::optional<std::string> contract;   // bench: run the server's contract benchmark with this file
  std::optional<int> repeats;            // bench --contract: timed repeats (at least 2)
  std::optional<std::string> reference;  // bench --contract: an earlier report every run must equal
  std::optional<std::string> build;      // bundle create: the build directory
  std::optional<std::string> out;        // bundle create: the new bundle directory
  bool strip_debug = false;              // bundle create: strip debug info from the binaries
  std::optional<std::string> source;     // bundle verify: the checkout whose tree must be the built one
};

// `positional` is what follows the program name once flags are removed: the subcommand, then its
// operands (manifest --diff A.json B.json, bench --json FILE).
int RunCli(const std::vector<std::string>& positional, const CliArgs& args, std::ostream& out,
           std::ostream& err);

std::string UsageText();

// Rewrites `--json=FILE` (a value that is not a boolean) into `--json FILE`, so that the boolean
// --json flag leaves FILE as an operand for bench. argv[0] included.
std::vector<std::string> NormalizeArgv(std::vector<std::string> argv);

// "1, 2,3" → {1, 2, 3}; `flag` names the flag in errors. Empty text is an empty list.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& flag);

// The request `q38 generate` sends for `args` (validated here only as far as the command line
// goes: the server checks the sampling ranges).
absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const CliArgs& args);

}  // namespace q38::client
