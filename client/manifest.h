// `q38 manifest`: the server's provenance as a table, as JSON, and a field-by-field diff of two
// saved JSON manifests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "q38/v1/q38.pb.h"

namespace q38::client {

// Pretty JSON in the proto3 mapping with .proto field names and every field present; this is what
// `q38 manifest --json` prints and `--diff` reads.
std::string ManifestToJson(const v1::Manifest& manifest);
// Strict: unknown fields and malformed JSON are InvalidArgument.
absl::StatusOr<v1::Manifest> ManifestFromJson(std::string_view json);

// The header (build id, model, tp) and one row per worker.
std::string FormatManifestTable(const v1::Manifest& manifest);

// The first `n` characters of the part after the last ':' (a digest's algorithm prefix dropped)
// are kept when an id is longer than n.
std::string ShortId(std::string_view id, size_t n = 12);

struct FieldDiff {
  std::string path;  // "build_id", "workers[rank=1].device", "workers[rank=3]"
  std::string a;     // the value in A, text format; "(absent)" for a worker only in B
  std::string b;
};

// Every field of the two manifests; workers are matched by rank. A field is skipped when its
// path without the worker selector ("workers.pid", "build_id") is in `ignore`.
std::vector<FieldDiff> DiffManifests(const v1::Manifest& a, const v1::Manifest& b,
                                     const std::vector<std::string>& ignore);

}  // namespace q38::client
