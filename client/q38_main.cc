// `q38`: the command line of the q38 server (generate, health, manifest, info, bench, bundle). The
// subcommands live in client/cli.cc; this file declares the flags and hands them over.
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/cli.h"

ABSL_FLAG(std::optional<std::string>, server, std::nullopt, "server address: host:port or unix:/path");
ABSL_FLAG(std::string, tls_ca, "", "connect over TLS, trusting this PEM certificate (the server's --tls_cert or its CA)");
ABSL_FLAG(std::string, tls_server_name, "", "with --tls_ca: the name the certificate must carry, if not the host's");
ABSL_FLAG(std::string, api_key_file, "", "send the first key in this file as \"authorization: Bearer KEY\"");
ABSL_FLAG(std::optional<std::string>, tokens, std::nullopt, "prompt token ids, comma-separated");
ABSL_FLAG(std::optional<std::string>, text, std::nullopt, "prompt text (the server tokenizes it)");
ABSL_FLAG(std::optional<int>, max_tokens, std::nullopt, "tokens to generate at most");
ABSL_FLAG(std::optional<float>, temperature, std::nullopt, "sampling temperature; absent or 0: greedy");
ABSL_FLAG(std::optional<int>, top_k, std::nullopt, "sample among the k most likely tokens; 0: no limit");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt, "nucleus sampling mass in (0, 1]");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "sampling seed (generate); synthetic prompt seed (bench --prompt_len), default 0");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past EOS until --max_tokens");
ABSL_FLAG(std::optional<int>, logprobs, std::nullopt,
          "each token's log probability and this many most likely alternatives (0-20; --json shows them)");
ABSL_FLAG(std::optional<std::string>, stop_token_ids, std::nullopt, "extra stop token ids, comma-separated");
ABSL_FLAG(bool, json, false,
          "print JSON; bench: --json FILE writes the report to FILE and prints the table");
ABSL_FLAG(std::optional<double>, timeout_s, std::nullopt,
          "deadline per call in seconds (default: none for generate and bench, 10 otherwise)");
ABSL_FLAG(bool, diff, false, "manifest: compare two saved manifests, --diff A.json B.json");
ABSL_FLAG(std::optional<std::string>, ignore_fields, std::nullopt,
          "manifest --diff: comma-separated fields to skip (default workers.pid)");
ABSL_FLAG(std::optional<int>, prompt_len, std::nullopt, "bench: a synthetic prompt of N token ids");
ABSL_FLAG(std::optional<int>, vocab, std::nullopt,
          "bench: draw synthetic prompt ids from [0, V) (default: the server's vocab_size)");
ABSL_FLAG(std::optional<int>, requests, std::nullopt, "bench: timed requests (default 1)");
ABSL_FLAG(std::optional<int>, warmup, std::nullopt, "bench: untimed requests first (default 1)");
ABSL_FLAG(std::optional<std::string>, tokenizer, std::nullopt,
          "bench: with --prompt_len, the model's tokenizer directory: the prompt is the contract's fixed sentence repeated to N tokens");
ABSL_FLAG(std::optional<std::string>, sentence, std::nullopt, "bench --tokenizer: the sentence (default: the contract's)");
ABSL_FLAG(std::optional<std::string>, contract, std::nullopt,
          "bench: run the server's contract benchmark (Benchmark RPC) with this contract file");
ABSL_FLAG(std::optional<int>, repeats, std::nullopt, "bench --contract: timed repeats, at least 2 (default: the contract's)");
ABSL_FLAG(std::optional<std::string>, reference, std::nullopt,
          "bench --contract: an earlier report; every timed run must equal its runs[0] tokens");
ABSL_FLAG(std::optional<std::string>, build, std::nullopt, "bundle create: the build directory (holds build_manifest.json)");
ABSL_FLAG(std::optional<std::string>, out, std::nullopt, "bundle create: the bundle directory to make (must not exist)");
ABSL_FLAG(bool, strip_debug, false, "bundle create: strip debug info from the bundled binaries");
ABSL_FLAG(std::optional<std::string>, source, std::nullopt, "bundle verify: also require this checkout's production tree");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(q38::client::UsageText());
  std::vector<std::string> normalized =
      q38::client::NormalizeArgv(std::vector<std::string>(argv, argv + argc));
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(normalized.size()), args.data());

  q38::client::CliArgs a;
  a.server = absl::GetFlag(FLAGS_server);
  for (auto [flag, file, into] : {std::tuple{"--tls_ca", absl::GetFlag(FLAGS_tls_ca), &a.connect.tls_ca},
                                  std::tuple{"--api_key_file", absl::GetFlag(FLAGS_api_key_file), &a.connect.api_key}}) {
    if (file.empty()) continue;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty()) {
      std::cerr << "q38: " << flag << ": cannot read " << file << "\n";
      return 2;
    }
    *into = text.str();
  }
  // An API key file may list several keys; the first one is sent.
  a.connect.api_key = a.connect.api_key.substr(0, a.connect.api_key.find('\n'));
  a.connect.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  a.tokens = absl::GetFlag(FLAGS_tokens);
  a.text = absl::GetFlag(FLAGS_text);
  a.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  a.temperature = absl::GetFlag(FLAGS_temperature);
  a.top_k = absl::GetFlag(FLAGS_top_k);
  a.top_p = absl::GetFlag(FLAGS_top_p);
  a.seed = absl::GetFlag(FLAGS_seed);
  a.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  a.logprobs = absl::GetFlag(FLAGS_logprobs);
  a.stop_token_ids = absl::GetFlag(FLAGS_stop_token_ids);
  a.json = absl::GetFlag(FLAGS_json);
  a.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  a.diff = absl::GetFlag(FLAGS_diff);
  a.ignore_fields = absl::GetFlag(FLAGS_ignore_fields);
  a.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  a.vocab = absl::GetFlag(FLAGS_vocab);
  a.requests = absl::GetFlag(FLAGS_requests);
  a.warmup = absl::GetFlag(FLAGS_warmup);
  a.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  a.sentence = absl::GetFlag(FLAGS_sentence);
  a.contract = absl::GetFlag(FLAGS_contract);
  a.repeats = absl::GetFlag(FLAGS_repeats);
  a.reference = absl::GetFlag(FLAGS_reference);
  a.build = absl::GetFlag(FLAGS_build);
  a.out = absl::GetFlag(FLAGS_out);
  a.strip_debug = absl::GetFlag(FLAGS_strip_debug);
  a.source = absl::GetFlag(FLAGS_source);

  // positional[0] is the program name.
  std::vector<std::string> rest(positional.begin() + 1, positional.end());
  return q38::client::RunCli(rest, a, std::cout, std::cerr);
}
