#include "proto/enum_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace q38 {
namespace {

// `name` without `prefix`, lower-cased; the number itself for a value the enum does not name.
std::string ShortName(const std::string& name, absl::string_view prefix, int value) {
  if (name.empty()) return std::to_string(value);
  return absl::AsciiStrToLower(absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name);
}

}  // namespace

std::string FinishReasonName(v1::FinishReason reason) {
  return ShortName(v1::FinishReason_Name(reason), "FINISH_REASON_", reason);
}

std::string CancelReasonName(worker::v1::CancelReason reason) {
  return ShortName(worker::v1::CancelReason_Name(reason), "CANCEL_REASON_", reason);
}

}  // namespace q38
