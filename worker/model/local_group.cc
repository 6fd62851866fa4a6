#include "worker/model/local_group.h"

#include <thread>

#include "common/status.h"

namespace q38 {

absl::Status RunLocalGroup(const ModelConfig& config, const TensorStore& store, int tp,
                           const std::function<absl::Status(Model&)>& fn) {
  if (tp < 1) return absl::InvalidArgumentError("tp must be at least 1");
  std::vector<std::unique_ptr<Communicator>> comms = MakeInProcessGroup(tp);
  std::vector<absl::Status> results(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        std::unique_ptr<Backend> backend = MakeCpuBackend();
        ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(config, store, *backend, {r, tp}));
        Model model(config, std::move(weights), *backend, *comms[r]);
        return fn(model);
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace q38
