#include "worker/model/checkpoint_source.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace q38 {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

float ReadFloat(const TensorView& v, int64_t i) {
  uint16_t half;
  switch (v.dtype) {
    case DType::kBF16:
      std::memcpy(&half, v.data + 2 * i, 2);
      return Bf16ToFloat(half);
    case DType::kF16:
      std::memcpy(&half, v.data + 2 * i, 2);
      return Fp16ToFloat(half);
    default: {
      float x;
      std::memcpy(&x, v.data + 4 * i, 4);
      return x;
    }
  }
}

// The MTP head and the vision tower are outside the text model (docs/model.md §2).
bool Ignored(const std::string& name) {
  return absl::StartsWith(name, "mtp.") || absl::StartsWith(name, "model.mtp.") ||
         absl::StartsWith(name, "model.visual.") || absl::StartsWith(name, "visual.");
}

}  // namespace

absl::StatusOr<SchemaOptions> CheckpointSource::Layout() const {
  for (const char* p : {"model.language_model.", "model."}) {
    if (store_.Find(std::string(p) + "embed_tokens.weight") == nullptr) continue;
    // The loader's schema lists the FP8 table's scale; it is read only when the shards are FP8.
    return SchemaOptions{.nvfp4_experts = store_.Find(std::string(p) + "layers.0.mlp.experts.gate_up_proj") == nullptr,
                         .fp8_ple = true,
                         .prefix = p};
  }
  return absl::NotFoundError("checkpoint: missing tensor model.language_model.embed_tokens.weight");
}

absl::StatusOr<const TensorView*> CheckpointSource::Get(const TensorSpec& t) {
  const TensorView* v = store_.Find(t.name);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("checkpoint: missing tensor ", t.name));
  used_.insert(t.name);
  const bool scalar_ok = t.scalar && (v->shape.empty() || v->shape == std::vector<int64_t>{1});
  if (v->shape != t.shape && !scalar_ok) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", t.name, " in ", v->file, " has shape ",
                                                   ShapeString(v->shape), ", expected ", ShapeString(t.shape)));
  }
  for (DType d : t.dtypes) {
    if (v->dtype == d) return v;
  }
  std::vector<std::string> names;
  for (DType d : t.dtypes) names.emplace_back(DTypeName(d));
  return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", t.name, " in ", v->file, " has dtype ",
                                                 std::string(DTypeName(v->dtype)), ", expected ", absl::StrJoin(names, " or ")));
}

absl::StatusOr<float> CheckpointSource::Scalar(const TensorSpec& t) {
  ASSIGN_OR_RETURN(const TensorView* v, Get(t));
  return ReadFloat(*v, 0);
}

absl::StatusOr<Buffer> CheckpointSource::Floats(const TensorSpec& t, const Ranges& rows, Range cols, bool f32) {
  ASSIGN_OR_RETURN(const TensorView* v, Get(t));
  const int64_t row_len = t.shape.size() >= 2 ? t.shape.back() : 1;
  const Ranges all = {{0, v->numel() / row_len}};
  if (cols.second < 0) cols = {0, row_len};
  std::vector<float> out;
  int64_t n_rows = 0;
  for (auto [begin, count] : rows.empty() ? all : rows) {
    n_rows += count;
    for (int64_t r = begin; r < begin + count; ++r) {
      for (int64_t c = cols.first; c < cols.first + cols.second; ++c) out.push_back(ReadFloat(*v, r * row_len + c));
    }
  }
  std::vector<int64_t> shape = {n_rows};
  if (t.shape.size() >= 2) shape.push_back(cols.second);
  return f32 ? backend_.UploadF32(out, shape) : backend_.Upload(out, shape);
}

absl::StatusOr<Nvfp4ExpertWeights> CheckpointSource::Nvfp4Routed(const Nvfp4ExpertSpecs& x, Range slice) {
  const int64_t E = static_cast<int64_t>(x.gate.size()), I = x.gate[0].codes->shape[0];
  const int64_t H = 2 * x.gate[0].codes->shape[1];
  const auto [begin, Il] = slice;
  std::vector<uint8_t> gu_codes(E * 2 * Il * H / 2), gu_scales(E * 2 * Il * H / 16);
  std::vector<uint8_t> dn_codes(E * H * Il / 2), dn_scales(E * H * Il / 16);
  std::vector<float> g_gate(E), g_up(E), g_down(E);
  for (int64_t e = 0; e < E; ++e) {
    for (int half = 0; half < 2; ++half) {
      const Nvfp4Projection& p = (half == 0 ? x.gate : x.up)[e];
      ASSIGN_OR_RETURN(const TensorView* w, Get(*p.codes));
      ASSIGN_OR_RETURN(const TensorView* sc, Get(*p.scales));
      ASSIGN_OR_RETURN((half == 0 ? g_gate : g_up)[e], Scalar(*p.global));
      RETURN_IF_ERROR(Scalar(*p.input_scale).status());  // for W4A4 only
      const int64_t dst_row = (e * 2 + half) * Il;
      std::memcpy(&gu_codes[dst_row * H / 2], w->data + begin * H / 2, Il * H / 2);
      std::memcpy(&gu_scales[dst_row * H / 16], sc->data + begin * H / 16, Il * H / 16);
    }
    const Nvfp4Projection& p = x.down[e];
    ASSIGN_OR_RETURN(const TensorView* w, Get(*p.codes));
    ASSIGN_OR_RETURN(const TensorView* sc, Get(*p.scales));
    ASSIGN_OR_RETURN(g_down[e], Scalar(*p.global));
    RETURN_IF_ERROR(Scalar(*p.input_scale).status());
    for (int64_t n = 0; n < H; ++n) {
      std::memcpy(&dn_codes[(e * H + n) * Il / 2], w->data + n * I / 2 + begin / 2, Il / 2);
      std::memcpy(&dn_scales[(e * H + n) * Il / 16], sc->data + n * I / 16 + begin / 16, Il / 16);
    }
  }
  Nvfp4ExpertWeights q;
  q.gate_up_codes = backend_.UploadRaw(gu_codes.data(), DType::kU8, {E, 2 * Il, H / 2});
  q.gate_up_scales = backend_.UploadRaw(gu_scales.data(), DType::kU8, {E, 2 * Il, H / 16});
  q.down_codes = backend_.UploadRaw(dn_codes.data(), DType::kU8, {E, H, Il / 2});
  q.down_scales = backend_.UploadRaw(dn_scales.data(), DType::kU8, {E, H, Il / 16});
  q.gate_global = backend_.UploadF32(g_gate, {E});
  q.up_global = backend_.UploadF32(g_up, {E});
  q.down_global = backend_.UploadF32(g_down, {E});
  return q;
}

absl::StatusOr<PleTable> CheckpointSource::NgramTable(const std::vector<const TensorSpec*>& shards,
                                                      const TensorSpec& scale) {
  PleTable t;
  t.rows_per_shard = shards[0]->shape[0];
  t.row_width = shards[0]->shape[1];
  for (size_t sh = 0; sh < shards.size(); ++sh) {
    ASSIGN_OR_RETURN(const TensorView* v, Get(*shards[sh]));
    if (sh > 0 && v->dtype != t.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", shards[sh]->name, " has dtype ",
                                                     std::string(DTypeName(v->dtype)), " unlike shard 0 (",
                                                     std::string(DTypeName(t.dtype)), ")"));
    }
    t.dtype = v->dtype;
    t.shards.push_back(v->data);
  }
  if (t.dtype == DType::kF8E4M3) {
    ASSIGN_OR_RETURN(t.scale, Scalar(scale));
  }
  return t;
}

absl::Status CheckpointSource::CheckValues(const TensorSpec& t) {
  ASSIGN_OR_RETURN(const TensorView* v, Get(t));
  for (size_t i = 0; i < t.values.size(); ++i) {
    int64_t got;
    std::memcpy(&got, v->data + 8 * i, 8);
    if (got != t.values[i]) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", t.name, "[", i, "] = ", got,
                                                     " differs from the value the config derives, ", t.values[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointSource::CheckAllUsed() const {
  std::vector<std::string> extra;
  for (const std::string& name : store_.Names()) {
    if (used_.count(name) || Ignored(name)) continue;
    extra.push_back(name);
  }
  if (extra.empty()) return absl::OkStatus();
  if (extra.size() > 5) extra.resize(5);
  return absl::InvalidArgumentError(absl::StrCat("checkpoint: unexpected tensor(s) ", absl::StrJoin(extra, ", ")));
}

}  // namespace q38
