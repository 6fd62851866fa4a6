#include "server/group_check.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace q38 {
namespace {

// The shared objects a rank maps that a bundle would carry (the C library's and the driver's differ
// legitimately by what each process happened to load).
std::set<std::pair<std::string, std::string>> BundledObjects(const v1::WorkerManifest& w) {
  std::set<std::pair<std::string, std::string>> out;
  for (const v1::MappedObject& o : w.mapped_objects()) {
    if (!IsSystemLibrary(o.path())) out.emplace(o.path(), o.sha256());
  }
  return out;
}

}  // namespace

absl::Status CheckGroup(const std::vector<worker::v1::WorkerInfo>& infos, int tp) {
  std::set<int> ranks;
  if (infos.empty()) return absl::FailedPreconditionError("no ranks");
  const v1::WorkerManifest& first = infos[0].manifest();
  for (const auto& i : infos) {
    const v1::WorkerManifest& m = i.manifest();
    if (i.world() != tp) return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " thinks the group has ", i.world(), " ranks, not ", tp));
    if (m.rank() != i.rank()) return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " reports rank ", m.rank(), " in its manifest"));
    if (!ranks.insert(i.rank()).second) return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " appears twice"));
    if (m.build_id() != first.build_id()) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " runs build ", m.build_id(), ", rank ", infos[0].rank(), " runs ", first.build_id()));
    }
    if (m.model().fingerprint() != first.model().fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " loaded a different model"));
    }
    if (BundledObjects(m) != BundledObjects(first)) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", i.rank(), " maps other shared objects than rank ", infos[0].rank()));
    }
  }
  if (static_cast<int>(ranks.size()) != tp || *ranks.begin() != 0 || *ranks.rbegin() != tp - 1) {
    return absl::FailedPreconditionError(absl::StrCat("ranks present: ", ranks.size(), " of ", tp));
  }
  return absl::OkStatus();
}

Verdict CheckGroupAgainstBundle(const std::vector<worker::v1::WorkerInfo>& infos, const Bundle& bundle) {
  for (const auto& i : infos) {
    const v1::WorkerManifest& m = i.manifest();
    const std::string who = absl::StrCat("rank ", i.rank());
    if (Verdict v = CheckBundledExecutable(bundle, "q38-worker", m.executable()); !v.ok()) return {v.refusal, who + ": " + v.message};
    std::vector<MappedObject> objects;
    for (const v1::MappedObject& o : m.mapped_objects()) objects.push_back({o.path(), o.sha256()});
    if (Verdict v = CheckMappedObjects(bundle, who, objects); !v.ok()) return v;
  }
  return {};
}

v1::Manifest MakeManifest(const std::vector<worker::v1::WorkerInfo>& infos, const std::string& model, int tp) {
  v1::Manifest m;
  m.set_model(model);
  m.set_tp(tp);
  std::vector<const worker::v1::WorkerInfo*> sorted;
  for (const auto& i : infos) sorted.push_back(&i);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->rank() < b->rank(); });
  for (const auto* i : sorted) *m.add_workers() = i->manifest();
  if (!sorted.empty()) m.set_build_id(sorted[0]->manifest().build_id());
  return m;
}

}  // namespace q38
