#include "worker/model/synthetic_source.h"

#include <cmath>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/splitmix64.h"
#include "worker/model/host_shared_table.h"

namespace q38 {

Buffer SyntheticSource::Random(const std::string& name, DType dtype, std::vector<int64_t> shape, float spread) {
  uint64_t seed = seed_;
  for (unsigned char ch : name) seed = SplitMix64(seed ^ ch);
  Buffer b = backend_.Alloc(dtype, std::move(shape));
  backend_.FillRandom(b.t(), seed, spread);
  return b;
}

absl::StatusOr<Buffer> SyntheticSource::Floats(const TensorSpec& t, const Ranges& rows, Range cols, bool f32) {
  const int64_t row_len = t.shape.size() >= 2 ? t.shape.back() : 1;
  int64_t n_rows = 0;
  for (auto [begin, count] : rows) n_rows += count;
  if (rows.empty()) {
    n_rows = 1;
    for (int64_t d : t.shape) n_rows *= d;
    n_rows /= row_len;
  }
  std::vector<int64_t> shape = {n_rows};
  if (t.shape.size() >= 2) shape.push_back(cols.second < 0 ? row_len : cols.second);
  // Matrices of fan-in K get ±sqrt(3/K) (activations stay of order one); vectors (norms, gate
  // constants) ±0.1 around zero. A rank's slice is drawn apart from the others'.
  const float spread = t.shape.size() >= 2 ? std::sqrt(3.0f / static_cast<float>(row_len)) : 0.1f;
  const int64_t first = rows.empty() ? 0 : rows.front().first;
  return Random(t.name + (first > 0 ? absl::StrCat("@", first) : ""), f32 ? DType::kF32 : backend_.act_dtype(),
                shape, spread);
}

absl::StatusOr<Nvfp4ExpertWeights> SyntheticSource::Nvfp4Routed(const Nvfp4ExpertSpecs& x, Range slice) {
  const int64_t E = static_cast<int64_t>(x.gate.size()), H = 2 * x.gate[0].codes->shape[1], Il = slice.second;
  // Named for the layer's MoE prefix and the rank, as the draws have always been.
  const std::string& first = x.gate[0].codes->name;
  const std::string p = first.substr(0, first.find("experts."));
  const std::string r = absl::StrCat("@", slice.first / Il);
  Nvfp4ExpertWeights q;
  q.gate_up_codes = Random(p + "gate_up_codes" + r, DType::kU8, {E, 2 * Il, H / 2}, 0);
  q.gate_up_scales = Random(p + "gate_up_scales" + r, DType::kF8E4M3, {E, 2 * Il, H / 16}, 0);
  q.down_codes = Random(p + "down_codes" + r, DType::kU8, {E, H, Il / 2}, 0);
  q.down_scales = Random(p + "down_scales" + r, DType::kF8E4M3, {E, H, Il / 16}, 0);
  // One global of the generator's order for every projection: the synthetic activations, and with
  // them the routing every full-size speed number was measured under, depend on it.
  const std::vector<float> global(E, 1.0f / (3.5f * 40.0f));
  q.gate_global = backend_.UploadF32(global, {E});
  q.up_global = backend_.UploadF32(global, {E});
  q.down_global = backend_.UploadF32(global, {E});
  return q;
}

// One shard of every row, FP8 bytes of moderate magnitude, filled by all cores (the release's
// table is 51 GB) once per host: every rank process of the host maps the same memory
// (host_shared_table.h), or, where that cannot be had, fills its own.
absl::StatusOr<PleTable> SyntheticSource::NgramTable(const std::vector<const TensorSpec*>& shards, const TensorSpec&) {
  PleTable t;
  t.rows_per_shard = shards[0]->shape[0] * static_cast<int64_t>(shards.size());
  t.row_width = shards[0]->shape[1];
  t.dtype = DType::kF8E4M3;
  t.scale = 0.05f;
  const size_t bytes = static_cast<size_t>(t.rows_per_shard) * t.row_width;
  const auto fill = [bytes](uint8_t* data) {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> fill;
    for (unsigned k = 0; k < n; ++k) {
      fill.emplace_back([=] {
        for (size_t i = bytes * k / n; i < bytes * (k + 1) / n; ++i) data[i] = SyntheticScaleByte(7, i) ^ (i & 0x80);
      });
    }
    for (auto& th : fill) th.join();
  };
  std::shared_ptr<const uint8_t> memory;
  if (absl::StatusOr<HostSharedTable> shared = MapHostSharedTable("synthetic-ngram-v1", bytes, fill); shared.ok()) {
    memory = shared->data;
  } else {
    std::shared_ptr<uint8_t[]> own(new uint8_t[bytes]);
    fill(own.get());
    memory = std::shared_ptr<const uint8_t>(own, own.get());
  }
  t.shards = {memory.get()};
  t.owner = std::move(memory);
  return t;
}

}  // namespace q38
