// q38-bench-model: prefill and decode throughput of a checkpoint at several TP sizes, as
// medians over repeated runs, without a server. Ranks are threads of this process (local group).
#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "tools/run/group_flags.h"
#include "worker/engine/greedy.h"
#include "worker/model/local_group.h"
#include "worker/model/routing_load.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, synthetic, "", "instead of --model: synthetic weights of this size (release | tiny), drawn on each rank");
ABSL_FLAG(uint64_t, seed, 1, "seed of the synthetic weights");
ABSL_FLAG(std::string, tp, "1,4", "comma-separated TP sizes");
ABSL_FLAG(int64_t, prompt_tokens, 128, "prompt length");
ABSL_FLAG(int64_t, decode_tokens, 64, "tokens to decode after the prompt");
ABSL_FLAG(int32_t, repeats, 5, "timed repeats per TP size (after one warmup)");
ABSL_FLAG(bool, prefill_chunk_times, false,
          "also time each 8,192-token prefill chunk (the device synchronized after each): tok/s along the prompt");
ABSL_FLAG(bool, routing_load, false,
          "instead of timing: prefill the prompt once at the first --tp with each MoE layer's routing copied to the "
          "host, and print how its pairs spread over the experts and the grouped route's tiles of each height");

namespace q38 {
namespace {

constexpr int64_t kPrefillChunk = 8192;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The TP sizes of --tp, in order.
absl::StatusOr<std::vector<int>> TpSizes() {
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_tp), ',')) {
    int tp;
    if (!absl::SimpleAtoi(part, &tp)) return absl::InvalidArgumentError("--tp: not a number");
    sizes.push_back(tp);
  }
  return sizes;
}

// fn on every rank of a TP group: the checkpoint's weights, or synthetic ones where store is null.
template <typename Fn>
absl::Status RunGroup(const ModelConfig& config, const TensorStore* store, int tp, const Fn& fn,
                      const LocalGroupOptions& group) {
  return store ? RunLocalGroup(config, *store, tp, fn, group)
               : RunSyntheticGroup(config, absl::GetFlag(FLAGS_seed), tp, fn, group);
}

// --routing_load: one prefill of the prompt (and the two decode steps GenerateGreedy asks for, not
// counted) at the first TP size, rank 0's view of each MoE layer's routing (the router is whole on
// every rank; rank 0 runs in this process even with --processes), one row per prefill chunk and
// layer. The routing hook copies to the host, so nothing here is timed, and a decode graph cannot
// run with it.
absl::Status PrintRoutingLoad(const ModelConfig& config, const TensorStore* store, const std::vector<int32_t>& prompt,
                              int tp, LocalGroupOptions group) {
  std::vector<absl::StatusOr<ExpertLoad>> loads;
  group.model.decode_graph = false;
  group.model.routing = [&](Routing& r) {
    if (r.rank == 0 && r.tokens > 1) loads.push_back(SummarizeRouting(r));
  };
  const int64_t P = static_cast<int64_t>(prompt.size());
  const auto run = [&](Model& model) -> absl::Status {
    Engine engine(model, P + 2, config.vocab_size);
    return GenerateGreedy(engine, prompt, 2, kPrefillChunk, false).status();
  };
  RETURN_IF_ERROR(RunGroup(config, store, tp, run, group));
  std::cout << "Routing of a " << P << "-token prefill at TP" << tp << ": pairs an expert, and the grouped route's "
            << "tiles of " << absl::StrJoin(kLoadTileRows, " / ") << " rows (share of their rows holding a pair)\n\n"
            << "| layer | first position | tokens | pairs | idle experts | median | busiest | tiles | filled |\n"
            << "|---|---|---|---|---|---|---|---|---|\n";
  for (const absl::StatusOr<ExpertLoad>& load : loads) {
    RETURN_IF_ERROR(load.status());
    std::cout << "| " << load->layer << " | " << load->first_position << " | " << load->tokens << " | " << load->pairs
              << " | " << load->idle << " | " << load->median << " | " << load->most << " | "
              << absl::StrJoin(load->tiles, " / ") << " | "
              << absl::StrJoin(load->filled, " / ", [](std::string* out, double f) {
                   absl::StrAppend(out, absl::StrFormat("%.0f%%", 100 * f));
                 })
              << " |\n";
  }
  return absl::OkStatus();
}

absl::Status Main() {
  const std::string dir = absl::GetFlag(FLAGS_model), synthetic = absl::GetFlag(FLAGS_synthetic);
  if (dir.empty() == synthetic.empty()) return absl::InvalidArgumentError("give exactly one of --model and --synthetic");
  if (!synthetic.empty() && synthetic != "release" && synthetic != "tiny") {
    return absl::InvalidArgumentError("--synthetic: expected release or tiny");
  }
  ModelConfig config = synthetic == "release" ? ReleaseModelConfig() : TinyModelConfig();
  std::unique_ptr<TensorStore> store;
  if (!dir.empty()) {
    ASSIGN_OR_RETURN(config, LoadModelConfig(dir));
    ASSIGN_OR_RETURN(store, TensorStore::Open(dir));
  }
  const int64_t P = absl::GetFlag(FLAGS_prompt_tokens), D = absl::GetFlag(FLAGS_decode_tokens);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (P < 1 || D < 2 || repeats < 1) return absl::InvalidArgumentError("need prompt ≥ 1, decode ≥ 2, repeats ≥ 1");
  std::vector<int32_t> prompt(P);
  for (int64_t i = 0; i < P; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % config.vocab_size);
  ASSIGN_OR_RETURN(LocalGroupOptions group, LocalGroupOptionsFromFlags());
  // CUDA does not survive a fork: the ranks of a second group would be forked from a process with a GPU.
  ASSIGN_OR_RETURN(const std::vector<int> tp_sizes, TpSizes());
  if (group.processes && group.device == "cuda" && tp_sizes.size() > 1) {
    return absl::InvalidArgumentError("--processes with --device cuda: one TP size a run");
  }
  if (absl::GetFlag(FLAGS_routing_load)) return PrintRoutingLoad(config, store.get(), prompt, tp_sizes.front(), group);
  nlohmann::json report = {{"model", dir.empty() ? "synthetic:" + synthetic : dir},
                           {"synthetic_weights", !synthetic.empty()},
                           {"device", group.device}, {"decode_graph", group.model.decode_graph},
                           {"cuda_grid_kernels", group.cuda_grid_kernels}, {"prompt_tokens", P}, {"decode_tokens", D}, {"repeats", repeats}, {"runs", nlohmann::json::array()}};
  std::cout << "TP  prefill tok/s (median)  decode tok/s (median)  TPOT ms\n";
  for (const int tp : tp_sizes) {
    std::vector<double> prefill, decode;
    std::vector<std::vector<double>> chunk_rates;  // [chunk][repeat] tok/s
    int64_t graph_kernels = -1;  // kernels a decode step's graph launches (CUDA with --decode_graph)
    const auto run = [&](Model& model) -> absl::Status {
      if (model.comm().rank() == 0) std::cerr << "tp " << tp << ": weights ready" << std::endl;
      Engine engine(model, P + D, config.vocab_size);
      for (int r = 0; r <= repeats; ++r) {  // run 0 is the warmup
        ASSIGN_OR_RETURN(GreedyResult g, GenerateGreedy(engine, prompt, static_cast<int32_t>(D), kPrefillChunk,
                                                         absl::GetFlag(FLAGS_prefill_chunk_times)));
        if (model.comm().rank() != 0) continue;
        double steps = 0;
        for (double s : g.step_seconds) steps += s;
        // Progress on stderr, so that a run cut short still shows how far it got.
        std::cerr << "tp " << tp << (r == 0 ? " warmup" : " repeat ") << (r == 0 ? "" : std::to_string(r)) << ": prefill "
                  << g.prefill_seconds << " s, decode " << g.step_seconds.size() / steps << " tok/s" << std::endl;
        if (r == 0) continue;
        prefill.push_back(P / g.prefill_seconds);
        decode.push_back(g.step_seconds.size() / steps);
        chunk_rates.resize(g.prefill_chunk_seconds.size());
        for (size_t c = 0; c < g.prefill_chunk_seconds.size(); ++c) {
          const int64_t tokens = std::min<int64_t>(kPrefillChunk, P - static_cast<int64_t>(c) * kPrefillChunk);
          chunk_rates[c].push_back(tokens / g.prefill_chunk_seconds[c]);
        }
      }
      if (model.comm().rank() == 0) graph_kernels = model.backend().captured_kernels();
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(RunGroup(config, store.get(), tp, run, group));
    const double pm = Median(prefill), dm = Median(decode);
    printf("%-3d %22.1f %22.1f %8.2f\n", tp, pm, dm, 1e3 / dm);
    // The greedy token adds 2 eager kernels a step (Backend::ArgMax) to the graph's.
    if (graph_kernels >= 0) std::cerr << "tp " << tp << ": " << graph_kernels << " kernels in the decode graph" << std::endl;
    std::vector<double> chunk_medians;
    for (const std::vector<double>& rates : chunk_rates) chunk_medians.push_back(Median(rates));
    if (!chunk_medians.empty()) {
      std::cerr << "tp " << tp << ": prefill tok/s by 8,192-token chunk (median):";
      for (double r : chunk_medians) std::cerr << " " << static_cast<int64_t>(r);
      std::cerr << std::endl;
    }
    report["runs"].push_back({{"tp", tp}, {"prefill_tokens_per_second", prefill}, {"decode_tokens_per_second", decode},
                              {"prefill_median", pm}, {"decode_median", dm}, {"decode_graph_kernels", graph_kernels},
                              {"prefill_chunk_tokens_per_second", chunk_medians}});
  }
  std::cout << report.dump() << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace q38

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Measures prefill and decode tok/s: q38-bench-model --model DIR [--tp 1,4] [--device cuda]");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = q38::Main(); !s.ok()) {
    std::cerr << "q38-bench-model: " << s << "\n";
    return 1;
  }
  return 0;
}
