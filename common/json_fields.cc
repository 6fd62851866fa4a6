#include "common/json_fields.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace q38 {

using nlohmann::json;

absl::Status FieldError(absl::string_view what, absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, ": ", problem));
}

absl::StatusOr<json> ParseJsonObject(const std::string& text, absl::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  return j;
}

bool Fields::Has(absl::string_view key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

absl::StatusOr<Fields> Fields::Object(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  if (!obj_.at(key).is_object()) return Error(key, "must be an object");
  return Fields(obj_.at(key), what_, Path(absl::StrCat(key, ".")));
}

absl::Status Fields::OnlyKeys(std::initializer_list<absl::string_view> known) const {
  for (const auto& [key, value] : obj_.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) return Error(key, "unknown field");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Fields::Int(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_number_integer()) return Error(key, "must be an integer");
  return v.get<int64_t>();
}

absl::StatusOr<int64_t> Fields::PositiveInt(absl::string_view key) const {
  ASSIGN_OR_RETURN(int64_t v, Int(key));
  if (v <= 0) return Error(key, absl::StrCat("must be positive, got ", v));
  return v;
}

absl::StatusOr<int64_t> Fields::IntOr(absl::string_view key, int64_t fallback) const {
  return Has(key) ? Int(key) : absl::StatusOr<int64_t>(fallback);
}

absl::StatusOr<double> Fields::Number(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_number()) return Error(key, "must be a number");
  return v.get<double>();
}

absl::StatusOr<std::string> Fields::String(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_string()) return Error(key, "must be a string");
  return v.get<std::string>();
}

absl::StatusOr<bool> Fields::Bool(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_boolean()) return Error(key, "must be true or false");
  return v.get<bool>();
}

absl::StatusOr<bool> Fields::BoolOr(absl::string_view key, bool fallback) const {
  return Has(key) ? Bool(key) : absl::StatusOr<bool>(fallback);
}

absl::StatusOr<std::vector<int64_t>> Fields::IntOrList(absl::string_view key) const {
  if (Has(key) && obj_.at(key).is_number_integer()) return std::vector<int64_t>{obj_.at(key).get<int64_t>()};
  absl::StatusOr<std::vector<int64_t>> list = IntList(key);
  if (!list.ok() || list->empty()) return Error(key, Has(key) ? "must be an int or a list of ints" : "missing");
  return list;
}

absl::StatusOr<std::vector<int64_t>> Fields::IntList(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_array()) return Error(key, "must be a list of integers");
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer()) return Error(key, "must be a list of integers");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Fields::StringList(absl::string_view key) const {
  if (!Has(key)) return Error(key, "missing");
  const json& v = obj_.at(key);
  if (!v.is_array()) return Error(key, "must be a list of strings");
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) return Error(key, "must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace q38
