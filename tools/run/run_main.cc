// q38-run: the model runner without a server. Loads a checkpoint, prefills token ids, decodes
// greedily and prints the ids and timings. --tp N runs N ranks as threads of this process.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tools/run/group_flags.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, prompt, "", "comma-separated token ids");
ABSL_FLAG(int64_t, max_tokens, 16, "tokens to generate");
ABSL_FLAG(int64_t, chunk, 8192, "prefill chunk size in tokens");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel ranks (threads of this process)");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace q38 {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) return absl::InvalidArgumentError("--prompt: not a token id: " + std::string(part));
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt: no token ids");
  return ids;
}

absl::Status Main() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) return absl::InvalidArgumentError("--model is required");
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, ParseIds(absl::GetFlag(FLAGS_prompt)));
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(std::unique_ptr<TensorStore> store, TensorStore::Open(dir));
  const int tp = absl::GetFlag(FLAGS_tp);
  ASSIGN_OR_RETURN(LocalGroupOptions group, LocalGroupOptionsFromFlags());
  GreedyResult g;
  RETURN_IF_ERROR(RunLocalGroup(config, *store, tp, [&](Model& model) -> absl::Status {
    ASSIGN_OR_RETURN(GreedyResult r, GenerateGreedy(model, prompt, absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_chunk)));
    if (model.comm().rank() == 0) g = std::move(r);
    return absl::OkStatus();
  }, group));
  double decode = 0;
  for (double s : g.step_seconds) decode += s;
  const double tpot = g.step_seconds.empty() ? 0 : decode / g.step_seconds.size();
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"tokens", g.tokens},
                        {"prompt_tokens", prompt.size()},
                        {"prefill_seconds", g.prefill_seconds},
                        {"prefill_tokens_per_second", prompt.size() / g.prefill_seconds},
                        {"decode_seconds", decode},
                        {"tpot_seconds", tpot},
                        {"decode_tokens_per_second", tpot > 0 ? 1.0 / tpot : 0.0},
                        {"tp", tp},
                        {"device", group.device}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "tokens: " << absl::StrJoin(g.tokens, ",") << "\n"
              << "prefill: " << prompt.size() << " tokens in " << g.prefill_seconds << " s ("
              << prompt.size() / g.prefill_seconds << " tok/s)\n"
              << "decode: " << g.step_seconds.size() << " steps, TPOT " << tpot * 1e3 << " ms ("
              << (tpot > 0 ? 1.0 / tpot : 0.0) << " tok/s), TP " << tp << "\n";
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs qwen4_exp greedily: q38-run --model DIR --prompt 1,2,3 [--max_tokens N] [--tp N]");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = q38::Main(); !s.ok()) {
    std::cerr << "q38-run: " << s << "\n";
    return 1;
  }
  return 0;
}
