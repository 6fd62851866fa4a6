#include "worker/model/routing_load.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace q38 {

absl::StatusOr<ExpertLoad> SummarizeRouting(const Routing& r) {
  if (static_cast<int64_t>(r.chosen.size()) != r.tokens * r.k || r.experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("routing: ", r.chosen.size(), " choices for ", r.tokens,
                                                   " tokens of ", r.k, " over ", r.experts, " experts"));
  }
  std::vector<int64_t> count(r.experts, 0);
  for (int32_t e : r.chosen) {
    if (e < 0 || e >= r.experts) {
      return absl::InvalidArgumentError(absl::StrCat("routing: expert ", e, " of ", r.experts));
    }
    ++count[e];
  }
  ExpertLoad load;
  load.layer = r.layer;
  load.first_position = r.first_position;
  load.tokens = r.tokens;
  load.pairs = static_cast<int64_t>(r.chosen.size());
  load.idle = std::count(count.begin(), count.end(), 0);
  for (int64_t rows : kLoadTileRows) {
    int64_t tiles = 0;
    for (int64_t c : count) tiles += (c + rows - 1) / rows;
    load.tiles.push_back(tiles);
    load.filled.push_back(tiles == 0 ? 0.0 : static_cast<double>(load.pairs) / static_cast<double>(tiles * rows));
  }
  std::sort(count.begin(), count.end());
  if (!count.empty()) {
    load.median = count[(count.size() - 1) / 2];
    load.most = count.back();
  }
  return load;
}

}  // namespace q38
