// What the coordinator requires of a started group before it serves (docs/design.md §1, §7): ranks
// 0..N-1 exactly once, one build, one model, the same shared objects mapped on every rank, and,
// when run from a bundle, every rank running the bundle's worker with the bundle's libraries.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "provenance/bundle.h"
#include "q38/v1/q38.pb.h"
#include "q38/worker/v1/worker.pb.h"

namespace q38 {

// FailedPrecondition naming the first rank that breaks the rule.
absl::Status CheckGroup(const std::vector<worker::v1::WorkerInfo>& infos, int tp);

// Each rank's executable and mapped shared objects against the bundle (provenance/bundle.h).
Verdict CheckGroupAgainstBundle(const std::vector<worker::v1::WorkerInfo>& infos, const Bundle& bundle);

// The served manifest: the workers' manifests, sorted by rank, under the group's identity.
v1::Manifest MakeManifest(const std::vector<worker::v1::WorkerInfo>& infos, const std::string& model, int tp);

}  // namespace q38
