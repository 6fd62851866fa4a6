// SHA-256 through OpenSSL, as lowercase hex: file fingerprints for checkpoints, bundles and
// manifests.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace q38 {

std::string Sha256Hex(absl::string_view bytes);
// Streams the file; NotFound or DataLoss naming the path on error.
absl::StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace q38
