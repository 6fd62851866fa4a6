#include "worker/model/weights.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "common/splitmix64.h"
#include "common/status.h"

namespace q38 {
namespace {

using Range = std::pair<int64_t, int64_t>;  // begin, count
using Ranges = std::vector<Range>;

std::string ShapeString(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

float ReadFloat(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kBF16: {
      uint16_t x;
      std::memcpy(&x, v.data + 2 * i, 2);
      return Bf16ToFloat(x);
    }
    case DType::kF16: {
      uint16_t x;
      std::memcpy(&x, v.data + 2 * i, 2);
      return Fp16ToFloat(x);
    }
    default: {
      float x;
      std::memcpy(&x, v.data + 4 * i, 4);
      return x;
    }
  }
}

// FP32 values of the given row ranges of `v` seen as [rows, row_len], columns
// [cols.first, +cols.second) of each row, concatenated.
std::vector<float> GatherFloats(const TensorView& v, const Ranges& rows, int64_t row_len, Range cols) {
  std::vector<float> out;
  for (auto [begin, count] : rows) {
    for (int64_t r = begin; r < begin + count; ++r) {
      for (int64_t c = cols.first; c < cols.first + cols.second; ++c) out.push_back(ReadFloat(v, r * row_len + c));
    }
  }
  return out;
}

// Reads tensors by name from the store, checking each against the shape the config implies, and
// remembers what it read so that anything left over can be reported.
class Loader {
 public:
  // Without a store the loader is synthetic: every tensor the config implies exists, with the
  // first dtype its reader accepts, and its values are drawn on the backend from `seed`.
  Loader(const TensorStore* store, Backend& backend, std::string prefix, uint64_t seed = 0)
      : store_(store), backend_(backend), prefix_(std::move(prefix)), seed_(seed) {}

  bool synthetic() const { return store_ == nullptr; }
  // The synthetic stream of one tensor: its values depend on the seed and its name only.
  uint64_t SeedOf(const std::string& name) const {
    uint64_t h = seed_;
    for (unsigned char ch : name) h = SplitMix64(h ^ ch);
    return h;
  }
  // A synthetic tensor filled on the backend.
  Buffer Random(const std::string& name, DType dtype, std::vector<int64_t> shape, float spread) {
    Buffer b = backend_.Alloc(dtype, std::move(shape));
    backend_.FillRandom(b.t(), SeedOf(name), spread);
    return b;
  }

  const std::string& prefix() const { return prefix_; }

  absl::StatusOr<const TensorView*> Get(const std::string& name, const std::vector<int64_t>& shape,
                                        std::initializer_list<DType> dtypes) {
    if (synthetic()) {
      synthetic_views_.push_back({name, *dtypes.begin(), shape, nullptr, 0, "synthetic"});
      return &synthetic_views_.back();
    }
    const TensorView* v = store_->Find(name);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat("checkpoint: missing tensor ", name));
    used_.insert(name);
    if (v->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", name, " in ", v->file, " has shape ",
                                                     ShapeString(v->shape), ", expected ", ShapeString(shape)));
    }
    for (DType d : dtypes) {
      if (v->dtype == d) return v;
    }
    std::vector<std::string> names;
    for (DType d : dtypes) names.emplace_back(DTypeName(d));
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", name, " in ", v->file, " has dtype ",
                                                   std::string(DTypeName(v->dtype)), ", expected ", absl::StrJoin(names, " or ")));
  }

  // A floating-point tensor (BF16, F16 or F32) as FP32 on the backend: the given row ranges of
  // its leading dimension, concatenated, and columns [cols.first, +cols.second) of each row.
  absl::StatusOr<Buffer> Dense(const std::string& name, const std::vector<int64_t>& shape,
                               Ranges rows = {}, Range cols = {0, -1}) {
    return Read(name, shape, std::move(rows), cols, /*f32=*/false);
  }
  // The same kept in FP32 on every backend, for gate constants the FP16 range would coarsen.
  absl::StatusOr<Buffer> DenseF32(const std::string& name, const std::vector<int64_t>& shape, Ranges rows) {
    return Read(name, shape, std::move(rows), {0, -1}, /*f32=*/true);
  }
  absl::StatusOr<Buffer> Read(const std::string& name, const std::vector<int64_t>& shape, Ranges rows, Range cols,
                              bool f32) {
    ASSIGN_OR_RETURN(const TensorView* v, Get(name, shape, {DType::kBF16, DType::kF16, DType::kF32}));
    const int64_t n_rows = shape.empty() ? 1 : shape[0];
    const int64_t row_len = v->numel() / std::max<int64_t>(n_rows, 1);
    if (rows.empty()) rows = {{0, n_rows}};
    if (cols.second < 0) cols = {0, row_len};
    int64_t total_rows = 0;
    for (auto [begin, count] : rows) total_rows += count;
    std::vector<int64_t> out_shape = shape;
    if (out_shape.empty()) out_shape = {1};
    out_shape[0] = total_rows;
    if (out_shape.size() == 2) out_shape[1] = cols.second;
    if (synthetic()) {
      // Matrices of fan-in K get ±sqrt(3/K) (activations stay of order one); vectors (norms,
      // gate constants) ±0.1 around zero.
      const float spread = out_shape.size() >= 2 ? std::sqrt(3.0f / static_cast<float>(row_len)) : 0.1f;
      return Random(name + (rows.front().first > 0 ? absl::StrCat("@", rows.front().first) : ""),
                    f32 ? DType::kF32 : backend_.act_dtype(), out_shape, spread);
    }
    const std::vector<float> out = GatherFloats(*v, rows, row_len, cols);
    return f32 ? backend_.UploadF32(out, out_shape) : backend_.Upload(out, out_shape);
  }

  // Whole tensor of given shape as FP32 (every dtype Dense reads), for small replicated weights.
  absl::StatusOr<Buffer> Full(const std::string& name, const std::vector<int64_t>& shape) { return Dense(name, shape); }

  absl::Status CheckAllUsed() const {
    if (synthetic()) return absl::OkStatus();
    std::vector<std::string> extra;
    for (const std::string& name : store_->Names()) {
      if (used_.count(name) || Ignored(name)) continue;
      extra.push_back(name);
    }
    if (extra.empty()) return absl::OkStatus();
    if (extra.size() > 5) extra.resize(5);
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: unexpected tensor(s) ", absl::StrJoin(extra, ", ")));
  }

  Backend& backend() { return backend_; }
  const TensorStore* store() const { return store_; }

 private:
  // The MTP head and the vision tower are outside the text model (docs/model.md §2).
  static bool Ignored(const std::string& name) {
    return absl::StartsWith(name, "mtp.") || absl::StartsWith(name, "model.mtp.") ||
           absl::StartsWith(name, "model.visual.") || absl::StartsWith(name, "visual.");
  }

  const TensorStore* store_;
  Backend& backend_;
  std::string prefix_;
  uint64_t seed_;
  std::deque<TensorView> synthetic_views_;
  std::set<std::string> used_;
};

absl::Status Divisible(int64_t n, int world, absl::string_view what) {
  if (n % world == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", what, " (", n,
                                                 ") is not divisible by the TP size ", world));
}

absl::StatusOr<HcWeights> LoadHc(Loader& L, const ModelConfig& c, const std::string& p, bool inject) {
  const int64_t W = c.hc_width(), R = c.hc_lowrank;
  HcWeights hc;
  ASSIGN_OR_RETURN(hc.norm, L.Full(p + "hc_norm.weight", {W}));
  ASSIGN_OR_RETURN(hc.up, L.Full(p + "input_mix_weight_up.weight", {W, R}));
  if (L.synthetic()) {
    const int64_t rows = R + (inject ? c.hc_count : 0);
    hc.down_inject = L.Random(p + "down_inject", L.backend().act_dtype(), {rows, W}, std::sqrt(3.0f / W));
    return hc;
  }
  // Down and inject both read the normalized state: stack them into one projection.
  ASSIGN_OR_RETURN(const TensorView* down, L.Get(p + "input_mix_weight_down.weight", {R, W},
                                                 {DType::kBF16, DType::kF16, DType::kF32}));
  std::vector<float> rows(static_cast<size_t>((R + (inject ? c.hc_count : 0)) * W));
  for (int64_t i = 0; i < R * W; ++i) rows[i] = ReadFloat(*down, i);
  if (inject) {
    ASSIGN_OR_RETURN(const TensorView* inj, L.Get(p + "block_inject_weight.weight", {c.hc_count, W},
                                                  {DType::kBF16, DType::kF16, DType::kF32}));
    for (int64_t i = 0; i < c.hc_count * W; ++i) rows[R * W + i] = ReadFloat(*inj, i);
  }
  hc.down_inject = L.backend().Upload(rows, {R + (inject ? c.hc_count : 0), W});
  return hc;
}

// Projections of one input, each [rows, K], stacked in order into one matrix.
StackedProjection Stack(Backend& backend, const std::vector<Buffer>& parts) {
  StackedProjection s;
  int64_t total = 0;
  for (const Buffer& p : parts) {
    s.rows.push_back(p.t().dim(0));
    total += p.t().dim(0);
  }
  s.weight = backend.Alloc(parts.front().t().dtype, {total, parts.front().t().dim(1)});
  int64_t at = 0;
  for (const Buffer& p : parts) {
    Tensor rows = s.weight.t().Rows(at, p.t().dim(0));
    backend.Copy(p.t(), rows);
    at += p.t().dim(0);
  }
  return s;
}

absl::StatusOr<GdnWeights> LoadGdn(Loader& L, const ModelConfig& c, const std::string& p, const ShardSpec& s) {
  RETURN_IF_ERROR(Divisible(c.gdn_key_heads, s.world, "linear_num_key_heads"));
  RETURN_IF_ERROR(Divisible(c.gdn_value_heads, s.world, "linear_num_value_heads"));
  const int64_t H = c.hidden_size, dk = c.gdn_key_dim, dv = c.gdn_value_dim;
  const int64_t hk = c.gdn_key_heads / s.world, hv = c.gdn_value_heads / s.world;
  const int64_t Dk = c.gdn_qk_width(), Dv = c.gdn_v_width(), C = c.gdn_conv_channels();
  // This rank's q, k and v channels inside the packed qkv rows (and the conv channels).
  const Ranges qkv_rows = {{s.rank * hk * dk, hk * dk}, {Dk + s.rank * hk * dk, hk * dk}, {2 * Dk + s.rank * hv * dv, hv * dv}};
  const Ranges v_rows = {{s.rank * hv * dv, hv * dv}};
  const Ranges heads = {{s.rank * hv, hv}};
  GdnWeights g;
  g.key_heads = hk;
  ASSIGN_OR_RETURN(Buffer qkv, L.Dense(p + "in_proj_qkv.weight", {C, H}, qkv_rows));
  ASSIGN_OR_RETURN(Buffer z, L.Dense(p + "in_proj_z.weight", {Dv, H}, v_rows));
  ASSIGN_OR_RETURN(Buffer b, L.Dense(p + "in_proj_b.weight", {c.gdn_value_heads, H}, heads));
  ASSIGN_OR_RETURN(Buffer a, L.Dense(p + "in_proj_a.weight", {c.gdn_value_heads, H}, heads));
  g.in = Stack(L.backend(), {qkv, z, b, a});
  ASSIGN_OR_RETURN(g.conv, L.Dense(p + "conv1d.weight", {C, 1, c.conv_kernel}, qkv_rows));
  g.conv.t().shape = {g.conv.t().dim(0), c.conv_kernel};
  ASSIGN_OR_RETURN(g.a_log, L.DenseF32(p + "A_log", {c.gdn_value_heads}, heads));
  ASSIGN_OR_RETURN(g.dt_bias, L.DenseF32(p + "dt_bias", {c.gdn_value_heads}, heads));
  ASSIGN_OR_RETURN(g.norm, L.Full(p + "norm.weight", {dv}));
  ASSIGN_OR_RETURN(g.out, L.Dense(p + "out_proj.weight", {H, Dv}, {}, {s.rank * hv * dv, hv * dv}));
  return g;
}

absl::StatusOr<AttentionWeights> LoadAttention(Loader& L, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  RETURN_IF_ERROR(Divisible(c.num_heads, s.world, "num_attention_heads"));
  const int64_t H = c.hidden_size, dh = c.head_dim, hq = c.num_heads / s.world;
  // With fewer KV heads than ranks, each KV head is held by world/Hkv consecutive ranks.
  const int64_t hkv = std::max<int64_t>(c.num_kv_heads / s.world, 1);
  if (c.num_kv_heads >= s.world) RETURN_IF_ERROR(Divisible(c.num_kv_heads, s.world, "num_key_value_heads"));
  else RETURN_IF_ERROR(Divisible(s.world, c.num_kv_heads, "the TP size over num_key_value_heads"));
  const int64_t kv0 = static_cast<int64_t>(s.rank) * c.num_kv_heads / s.world;
  Ranges q_rows, gate_rows;
  for (int64_t h = s.rank * hq; h < (s.rank + 1) * hq; ++h) {
    q_rows.push_back({2 * dh * h, dh});  // per head: query rows, then gate rows
    gate_rows.push_back({2 * dh * h + dh, dh});
  }
  const int64_t Q = int64_t{c.num_heads} * 2 * dh, KV = int64_t{c.num_kv_heads} * dh;
  const int64_t Hi = c.indexer_heads, di = c.indexer_head_dim;
  AttentionWeights a;
  a.q_heads = hq;
  a.kv_heads = hkv;
  ASSIGN_OR_RETURN(Buffer q, L.Dense(p + "q_proj.weight", {Q, H}, q_rows));
  ASSIGN_OR_RETURN(Buffer gate, L.Dense(p + "q_proj.weight", {Q, H}, gate_rows));
  ASSIGN_OR_RETURN(Buffer k, L.Dense(p + "k_proj.weight", {KV, H}, {{kv0 * dh, hkv * dh}}));
  ASSIGN_OR_RETURN(Buffer v, L.Dense(p + "v_proj.weight", {KV, H}, {{kv0 * dh, hkv * dh}}));
  ASSIGN_OR_RETURN(Buffer index_q, L.Dense(p + "indexer.index_qk_proj.weight", {(Hi + 1) * di, H}, {{0, Hi * di}}));
  ASSIGN_OR_RETURN(Buffer index_k, L.Dense(p + "indexer.index_qk_proj.weight", {(Hi + 1) * di, H}, {{Hi * di, di}}));
  a.in = Stack(L.backend(), {q, gate, k, v, index_q, index_k});
  ASSIGN_OR_RETURN(a.o, L.Dense(p + "o_proj.weight", {H, int64_t{c.num_heads} * dh}, {}, {s.rank * hq * dh, hq * dh}));
  ASSIGN_OR_RETURN(a.q_norm, L.Full(p + "q_norm.weight", {dh}));
  ASSIGN_OR_RETURN(a.k_norm, L.Full(p + "k_norm.weight", {dh}));
  ASSIGN_OR_RETURN(a.index_q_norm, L.Full(p + "indexer.q_layernorm.weight", {di}));
  ASSIGN_OR_RETURN(a.index_k_norm, L.Full(p + "indexer.k_layernorm.weight", {di}));
  return a;
}

// Scalar F32 tensors may be stored as [] or [1].
absl::StatusOr<float> ScalarF32(Loader& L, const std::string& name) {
  if (L.synthetic()) return 1.0f / (3.5f * 40.0f);  // a global scale of the generator's order
  const TensorView* v = L.store()->Find(name);
  const std::vector<int64_t> shape = (v != nullptr && v->shape.empty()) ? std::vector<int64_t>{} : std::vector<int64_t>{1};
  ASSIGN_OR_RETURN(v, L.Get(name, shape, {DType::kF32, DType::kBF16}));
  return ReadFloat(*v, 0);
}

// ModelOpt NVFP4 experts, one set of tensors per expert and projection (docs/model.md §14.1–14.2). Gate and
// up rows [rank·I', +I') are stacked into one 2I' projection; down keeps columns [rank·I', +I').
absl::StatusOr<ExpertWeights> LoadNvfp4Experts(Loader& L, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate, Il = I / s.world;
  if (Il % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: moe_intermediate_size / TP = ", Il,
                                                   " is not a multiple of the NVFP4 block of 16"));
  }
  Backend& b = L.backend();
  ExpertWeights x;
  x.nvfp4 = true;
  x.intermediate = Il;
  if (L.synthetic()) {
    const std::string r = absl::StrCat("@", s.rank);
    x.q.gate_up_codes = L.Random(p + "gate_up_codes" + r, DType::kU8, {E, 2 * Il, H / 2}, 0);
    x.q.gate_up_scales = L.Random(p + "gate_up_scales" + r, DType::kF8E4M3, {E, 2 * Il, H / 16}, 0);
    x.q.down_codes = L.Random(p + "down_codes" + r, DType::kU8, {E, H, Il / 2}, 0);
    x.q.down_scales = L.Random(p + "down_scales" + r, DType::kF8E4M3, {E, H, Il / 16}, 0);
    ASSIGN_OR_RETURN(const float global, ScalarF32(L, ""));
    const std::vector<float> g(E, global);
    x.q.gate_global = b.UploadF32(g, {E});
    x.q.up_global = b.UploadF32(g, {E});
    x.q.down_global = b.UploadF32(g, {E});
    return x;
  }
  std::vector<uint8_t> gu_codes(E * 2 * Il * H / 2), gu_scales(E * 2 * Il * H / 16);
  std::vector<uint8_t> dn_codes(E * H * Il / 2), dn_scales(E * H * Il / 16);
  std::vector<float> g_gate(E), g_up(E), g_down(E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, "experts.", e, ".");
    for (int half = 0; half < 2; ++half) {
      const std::string proj = ep + (half == 0 ? "gate_proj." : "up_proj.");
      ASSIGN_OR_RETURN(const TensorView* w, L.Get(proj + "weight", {I, H / 2}, {DType::kU8}));
      ASSIGN_OR_RETURN(const TensorView* sc, L.Get(proj + "weight_scale", {I, H / 16}, {DType::kF8E4M3, DType::kU8}));
      ASSIGN_OR_RETURN(float global, ScalarF32(L, proj + "weight_scale_2"));
      ASSIGN_OR_RETURN(float input_scale, ScalarF32(L, proj + "input_scale"));  // W4A4 only
      (void)input_scale;
      (half == 0 ? g_gate : g_up)[e] = global;
      const int64_t dst_row = (e * 2 + half) * Il;
      std::memcpy(&gu_codes[dst_row * H / 2], w->data + s.rank * Il * H / 2, Il * H / 2);
      std::memcpy(&gu_scales[dst_row * H / 16], sc->data + s.rank * Il * H / 16, Il * H / 16);
    }
    const std::string dp = ep + "down_proj.";
    ASSIGN_OR_RETURN(const TensorView* w, L.Get(dp + "weight", {H, I / 2}, {DType::kU8}));
    ASSIGN_OR_RETURN(const TensorView* sc, L.Get(dp + "weight_scale", {H, I / 16}, {DType::kF8E4M3, DType::kU8}));
    ASSIGN_OR_RETURN(g_down[e], ScalarF32(L, dp + "weight_scale_2"));
    ASSIGN_OR_RETURN(float input_scale, ScalarF32(L, dp + "input_scale"));
    (void)input_scale;
    for (int64_t n = 0; n < H; ++n) {
      std::memcpy(&dn_codes[(e * H + n) * Il / 2], w->data + n * I / 2 + s.rank * Il / 2, Il / 2);
      std::memcpy(&dn_scales[(e * H + n) * Il / 16], sc->data + n * I / 16 + s.rank * Il / 16, Il / 16);
    }
  }
  x.q.gate_up_codes = b.UploadRaw(gu_codes.data(), DType::kU8, {E, 2 * Il, H / 2});
  x.q.gate_up_scales = b.UploadRaw(gu_scales.data(), DType::kU8, {E, 2 * Il, H / 16});
  x.q.down_codes = b.UploadRaw(dn_codes.data(), DType::kU8, {E, H, Il / 2});
  x.q.down_scales = b.UploadRaw(dn_scales.data(), DType::kU8, {E, H, Il / 16});
  x.q.gate_global = b.UploadF32(g_gate, {E});
  x.q.up_global = b.UploadF32(g_up, {E});
  x.q.down_global = b.UploadF32(g_down, {E});
  return x;
}

// The official BF16 release fuses every expert into gate_up_proj [E, 2I, H] and down_proj [E, H, I].
absl::StatusOr<ExpertWeights> LoadDenseExperts(Loader& L, const ModelConfig& c, const std::string& p,
                                               const ShardSpec& s) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate, Il = I / s.world;
  Ranges gu_rows, dn_rows;
  for (int64_t e = 0; e < E; ++e) {
    gu_rows.push_back({e * 2 * I + s.rank * Il, Il});
    gu_rows.push_back({e * 2 * I + I + s.rank * Il, Il});
    dn_rows.push_back({e * H, H});
  }
  // Read as 2-D [E·rows, cols] views of the 3-D tensors.
  ASSIGN_OR_RETURN(const TensorView* gu, L.Get(p + "experts.gate_up_proj", {E, 2 * I, H}, {DType::kBF16, DType::kF16, DType::kF32}));
  ASSIGN_OR_RETURN(const TensorView* dn, L.Get(p + "experts.down_proj", {E, H, I}, {DType::kBF16, DType::kF16, DType::kF32}));
  ExpertWeights x;
  x.nvfp4 = false;
  x.intermediate = Il;
  x.dense.gate_up = L.backend().Upload(GatherFloats(*gu, gu_rows, H, {0, H}), {E, 2 * Il, H});
  x.dense.down = L.backend().Upload(GatherFloats(*dn, dn_rows, I, {s.rank * Il, Il}), {E, H, Il});
  return x;
}

absl::StatusOr<MoeWeights> LoadMoe(Loader& L, const ModelConfig& c, const std::string& p, const ShardSpec& s,
                                   bool nvfp4) {
  RETURN_IF_ERROR(Divisible(c.moe_intermediate, s.world, "moe_intermediate_size"));
  RETURN_IF_ERROR(Divisible(c.shared_intermediate, s.world, "shared_expert_intermediate_size"));
  const int64_t H = c.hidden_size, Is = c.shared_intermediate, Isl = Is / s.world;
  MoeWeights m;
  ASSIGN_OR_RETURN(Buffer router, L.Full(p + "gate.weight", {c.num_experts, H}));
  ASSIGN_OR_RETURN(Buffer shared_gate, L.Full(p + "shared_expert_gate.weight", {1, H}));
  // Gate rows then up rows of this rank, one part, so that one output feeds SiluMul.
  ASSIGN_OR_RETURN(Buffer gate, L.Dense(p + "shared_expert.gate_proj.weight", {Is, H}, {{s.rank * Isl, Isl}}));
  ASSIGN_OR_RETURN(Buffer up, L.Dense(p + "shared_expert.up_proj.weight", {Is, H}, {{s.rank * Isl, Isl}}));
  m.in = Stack(L.backend(), {router, Stack(L.backend(), {gate, up}).weight, shared_gate});
  ASSIGN_OR_RETURN(m.shared_down, L.Dense(p + "shared_expert.down_proj.weight", {H, Is}, {}, {s.rank * Isl, Isl}));
  if (nvfp4) {
    ASSIGN_OR_RETURN(m.experts, LoadNvfp4Experts(L, c, p, s));
  } else {
    ASSIGN_OR_RETURN(m.experts, LoadDenseExperts(L, c, p, s));
  }
  return m;
}

absl::Status CheckHashBuffer(Loader& L, const std::string& name, const std::vector<int64_t>& expected) {
  ASSIGN_OR_RETURN(const TensorView* v, L.Get(name, {static_cast<int64_t>(expected.size())}, {DType::kI64}));
  for (size_t i = 0; i < expected.size(); ++i) {
    int64_t got;
    std::memcpy(&got, v->data + 8 * i, 8);
    if (got != expected[i]) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", name, "[", i, "] = ", got,
                                                     " differs from the value the config derives, ", expected[i]));
    }
  }
  return absl::OkStatus();
}

// A synthetic n-gram table of the full size in host memory, FP8 bytes of moderate magnitude,
// filled by all cores (the release's is 51 GB).
PleWeights SyntheticTable(const ModelConfig& c, PleWeights w) {
  PleTable& t = w.table;
  t.rows_per_shard = w.hash.table_rows;
  t.row_width = c.ple_row_width();
  t.dtype = DType::kF8E4M3;
  t.scale = 0.05f;
  const size_t bytes = static_cast<size_t>(t.rows_per_shard) * t.row_width;
  std::shared_ptr<uint8_t[]> memory(new uint8_t[bytes]);
  uint8_t* data = memory.get();
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> fill;
  for (unsigned k = 0; k < n; ++k) {
    fill.emplace_back([=] {
      for (size_t i = bytes * k / n; i < bytes * (k + 1) / n; ++i) data[i] = SyntheticScaleByte(7, i) ^ (i & 0x80);
    });
  }
  for (auto& th : fill) th.join();
  t.shards = {data};
  t.owner = std::move(memory);
  return w;
}

absl::StatusOr<PleWeights> LoadPle(Loader& L, const ModelConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, W = c.hc_width(), D = c.ple_embed_dim;
  PleWeights w;
  w.hash = PleHash::Derive({c.vocab_size, c.ngram_size, c.heads_per_ngram, c.ngram_vocab_size_base,
                            c.ngram_vocab_divisor, c.seed, /*layer_index=*/0});
  ASSIGN_OR_RETURN(w.key, L.Full(p + "key_proj.weight", {W, D}));
  ASSIGN_OR_RETURN(w.value, L.Full(p + "value_proj.weight", {H, D}));
  ASSIGN_OR_RETURN(w.norm_key, L.Full(p + "norm_key.weight", {W}));
  ASSIGN_OR_RETURN(w.norm_query, L.Full(p + "norm_query.weight", {W}));
  ASSIGN_OR_RETURN(w.norm_conv, L.Full(p + "norm_conv.weight", {W}));
  ASSIGN_OR_RETURN(w.conv, L.Full(p + "conv1d.weight", {W, 1, c.ple_conv_kernel}));
  w.conv.t().shape = {W, c.ple_conv_kernel};
  const std::string e = p + "ple_embedding.";
  if (L.synthetic()) return SyntheticTable(c, w);
  RETURN_IF_ERROR(CheckHashBuffer(L, e + "layer_multipliers", w.hash.multipliers));
  RETURN_IF_ERROR(CheckHashBuffer(L, e + "ngram_heads_vocab_sizes", w.hash.head_sizes));
  RETURN_IF_ERROR(CheckHashBuffer(L, e + "ngram_heads_offsets", w.hash.head_offsets));

  const int parts = c.split_ngram_parts;
  if (w.hash.table_rows % parts != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", w.hash.table_rows, " n-gram table rows do not split into ",
                                                   parts, " shards (split_ngram_parts)"));
  }
  PleTable& t = w.table;
  t.rows_per_shard = w.hash.table_rows / parts;
  t.row_width = c.ple_row_width();
  for (int sh = 0; sh < parts; ++sh) {
    const std::string name = absl::StrCat(e, "ngram_embedding.shard_", sh, ".weight");
    ASSIGN_OR_RETURN(const TensorView* v, L.Get(name, {t.rows_per_shard, t.row_width},
                                                {DType::kF8E4M3, DType::kBF16, DType::kF32}));
    if (sh > 0 && v->dtype != t.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: tensor ", name, " has dtype ", std::string(DTypeName(v->dtype)),
                                                     " unlike shard 0 (", std::string(DTypeName(t.dtype)), ")"));
    }
    t.dtype = v->dtype;
    t.shards.push_back(v->data);
  }
  if (t.dtype == DType::kF8E4M3) {
    ASSIGN_OR_RETURN(t.scale, ScalarF32(L, e + "ngram_embedding.weight_scale"));
  }
  return w;
}

// The prefix the text model's tensors carry: the release's, or a text-only export's.
absl::StatusOr<std::string> DetectPrefix(const TensorStore& store) {
  for (const char* p : {"model.language_model.", "model."}) {
    if (store.Find(std::string(p) + "embed_tokens.weight") != nullptr) return std::string(p);
  }
  return absl::NotFoundError("checkpoint: missing tensor model.language_model.embed_tokens.weight");
}

// Reads (or, without a store, draws) every tensor for one rank.
absl::StatusOr<ModelWeights> Build(const ModelConfig& c, const TensorStore* store, Backend& backend, const ShardSpec& s,
                                   const std::function<void(int, int)>& progress, uint64_t synthetic_seed) {
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", s.rank, " outside a TP group of ", s.world));
  }
  RETURN_IF_ERROR(Divisible(c.vocab_size, s.world, "vocab_size"));
  std::string P = "model.language_model.";
  if (store != nullptr) {
    ASSIGN_OR_RETURN(P, DetectPrefix(*store));
  }
  Loader L(store, backend, P, synthetic_seed);
  const int64_t H = c.hidden_size, V = c.vocab_size, Vl = V / s.world;
  ModelWeights m;
  m.vocab_begin = s.rank * Vl;
  ASSIGN_OR_RETURN(m.embed, L.Full(P + "embed_tokens.weight", {V, H}));
  ASSIGN_OR_RETURN(m.lm_head, L.Dense("lm_head.weight", {V, H}, {{m.vocab_begin, Vl}}));
  ASSIGN_OR_RETURN(m.mixer, LoadHc(L, c, P + "hyper_connection_mixer.", /*inject=*/false));
  // The experts' format is the checkpoint's: NVFP4 per-expert tensors, or the fused BF16 ones.
  m.experts_nvfp4 = store == nullptr || store->Find(P + "layers.0.mlp.experts.gate_up_proj") == nullptr;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string lp = absl::StrCat(P, "layers.", i, ".");
    LayerWeights l;
    l.type = c.layer_types[i];
    ASSIGN_OR_RETURN(l.attn_hc, LoadHc(L, c, lp + "attn_hyper_connection.", true));
    ASSIGN_OR_RETURN(l.mlp_hc, LoadHc(L, c, lp + "mlp_hyper_connection.", true));
    if (c.is_attention(i)) {
      ASSIGN_OR_RETURN(l.attn, LoadAttention(L, c, lp + "self_attn.", s));
    } else {
      ASSIGN_OR_RETURN(l.gdn, LoadGdn(L, c, lp + "linear_attn.", s));
    }
    ASSIGN_OR_RETURN(l.moe, LoadMoe(L, c, lp + "mlp.", s, m.experts_nvfp4));
    if (c.has_ple(i)) {
      ASSIGN_OR_RETURN(PleWeights ple, LoadPle(L, c, lp + "ple."));
      l.ple = std::move(ple);
    }
    m.layers.push_back(std::move(l));
    if (progress) progress(i + 1, c.num_layers);
  }
  RETURN_IF_ERROR(L.CheckAllUsed());
  m.overflow_count = backend.overflow_count();
  return m;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& config, const TensorStore& store, Backend& backend,
                                         const ShardSpec& shard, const std::function<void(int, int)>& progress) {
  return Build(config, &store, backend, shard, progress, 0);
}

absl::StatusOr<ModelWeights> SyntheticWeights(const ModelConfig& config, Backend& backend, const ShardSpec& shard,
                                              uint64_t seed, const std::function<void(int, int)>& progress) {
  return Build(config, nullptr, backend, shard, progress, seed);
}

}  // namespace q38
