#include "client/manifest.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace q38::client {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string FieldText(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  auto element = [&](int index) {
    std::string s;
    google::protobuf::TextFormat::PrintFieldValueToString(m, f, index, &s);
    return s;
  };
  if (!f->is_repeated()) return element(-1);
  std::vector<std::string> parts;
  for (int i = 0; i < r->FieldSize(m, f); ++i) parts.push_back(element(i));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

bool Ignored(const std::vector<std::string>& ignore, const std::string& key) {
  return std::find(ignore.begin(), ignore.end(), key) != ignore.end();
}

// Compares the fields of two messages of one type. `path` names the message in the output and
// `key` without selectors, for `ignore`. Repeated message fields whose type has an int32 `rank`
// are matched by rank, other repeated messages by index.
void DiffMessages(const Message& a, const Message& b, const std::string& path,
                  const std::string& key, const std::vector<std::string>& ignore,
                  std::vector<FieldDiff>& out) {
  const google::protobuf::Descriptor* d = a.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string fpath = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    const std::string fkey = key.empty() ? f->name() : absl::StrCat(key, ".", f->name());
    if (Ignored(ignore, fkey)) continue;
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      std::string va = FieldText(a, f), vb = FieldText(b, f);
      if (va != vb) out.push_back({fpath, std::move(va), std::move(vb)});
      continue;
    }
    const Reflection* ra = a.GetReflection();
    const Reflection* rb = b.GetReflection();
    if (!f->is_repeated()) {
      DiffMessages(ra->GetMessage(a, f), rb->GetMessage(b, f), fpath, fkey, ignore, out);
      continue;
    }
    const FieldDescriptor* rank = f->message_type()->FindFieldByName("rank");
    const bool by_rank = rank && !rank->is_repeated() && rank->cpp_type() == FieldDescriptor::CPPTYPE_INT32;
    // selector → (element in A, element in B); std::map keeps ranks or indices in order.
    std::map<int64_t, std::pair<const Message*, const Message*>> pairs;
    for (int k = 0; k < ra->FieldSize(a, f); ++k) {
      const Message& e = ra->GetRepeatedMessage(a, f, k);
      pairs[by_rank ? e.GetReflection()->GetInt32(e, rank) : k].first = &e;
    }
    for (int k = 0; k < rb->FieldSize(b, f); ++k) {
      const Message& e = rb->GetRepeatedMessage(b, f, k);
      pairs[by_rank ? e.GetReflection()->GetInt32(e, rank) : k].second = &e;
    }
    for (const auto& [sel, pair] : pairs) {
      const std::string epath = absl::StrCat(fpath, by_rank ? "[rank=" : "[", sel, "]");
      if (pair.first && pair.second) {
        DiffMessages(*pair.first, *pair.second, epath, fkey, ignore, out);
      } else {
        out.push_back({epath, pair.first ? "(present)" : "(absent)",
                       pair.second ? "(present)" : "(absent)"});
      }
    }
  }
}

}  // namespace

std::string ManifestToJson(const v1::Manifest& manifest) {
  return ProtoJsonString(manifest, true);
}

absl::StatusOr<v1::Manifest> ManifestFromJson(std::string_view json) {
  v1::Manifest m;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &m, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a q38.v1.Manifest: ", status.message().as_string()));
  }
  return m;
}

std::string ShortId(std::string_view id, size_t n) {
  if (id.size() <= n) return std::string(id);
  const size_t colon = id.rfind(':');
  if (colon != std::string_view::npos) id = id.substr(colon + 1);
  return std::string(id.substr(0, n));
}

std::string FormatManifestTable(const v1::Manifest& manifest) {
  auto cell = [](std::string_view v) { return v.empty() ? std::string("-") : std::string(v); };
  std::string out = absl::StrCat("build ", cell(manifest.build_id()), "  model ", cell(manifest.model()), "  tp ",
                                 manifest.tp(), "\n");
  if (!manifest.bundle().empty()) {
    absl::StrAppend(&out, "bundle ", manifest.bundle(), "  commit ", cell(manifest.git_commit()), "  source ",
                    ShortId(manifest.source_fingerprint()), "\n");
  }
  if (!manifest.contract().empty()) absl::StrAppend(&out, "contract ", manifest.contract(), "\n");
  Table table({"rank", "pid", "device", "build id", "model", "synthetic", "communicator", "dtypes act/kv/gdn/conv",
               "graph", "context", "chunk", "libraries"});
  for (const v1::WorkerManifest& w : manifest.workers()) {
    const v1::EffectiveDtypes& t = w.dtypes();
    table.AddRow({absl::StrCat(w.rank()), absl::StrCat(w.pid()), cell(absl::StrJoin({w.device().kind(), w.device().name()}, " ")),
                  cell(ShortId(w.build_id())), cell(ShortId(w.model().fingerprint())), w.model().synthetic() ? "yes" : "no",
                  cell(w.communicator()),
                  absl::StrJoin({cell(t.activation()), cell(t.kv_cache()), cell(t.gdn_state()), cell(t.conv_state())}, "/"),
                  cell(w.graph_mode()), absl::StrCat(w.max_context()), absl::StrCat(w.prefill_chunk()),
                  absl::StrCat(w.mapped_objects_size())});
  }
  return out + table.Render();
}

std::vector<FieldDiff> DiffManifests(const v1::Manifest& a, const v1::Manifest& b,
                                     const std::vector<std::string>& ignore) {
  std::vector<FieldDiff> out;
  DiffMessages(a, b, "", "", ignore, out);
  return out;
}

}  // namespace q38::client
