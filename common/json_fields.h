// Typed, strict reads of JSON objects for every file q38 parses (config, build and bundle
// manifests, contracts): each error is InvalidArgument "<what>: <path>: <problem>", naming the
// field, and unknown keys can be refused.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace q38 {

// InvalidArgument "<what>: <path>: <problem>".
absl::Status FieldError(absl::string_view what, absl::string_view path, absl::string_view problem);

// `text` parsed as a JSON object, or InvalidArgument "<what>: ..." saying why not.
absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& text, absl::string_view what);

// Reads typed fields of one JSON object. `what` names the document ("config"), `prefix` the
// object's path within it ("text_config.").
class Fields {
 public:
  Fields(const nlohmann::json& obj, std::string what, std::string prefix = "")
      : obj_(obj), what_(std::move(what)), prefix_(std::move(prefix)) {}

  std::string Path(absl::string_view key) const { return absl::StrCat(prefix_, key); }
  absl::Status Error(absl::string_view key, absl::string_view problem) const {
    return FieldError(what_, Path(key), problem);
  }
  bool Has(absl::string_view key) const;
  const nlohmann::json& At(absl::string_view key) const { return obj_.at(key); }
  // A Fields over the object at `key` (an error when it is missing or not an object).
  absl::StatusOr<Fields> Object(absl::string_view key) const;
  // Refuses any key outside `known`, naming the first.
  absl::Status OnlyKeys(std::initializer_list<absl::string_view> known) const;

  absl::StatusOr<int64_t> Int(absl::string_view key) const;
  absl::StatusOr<int64_t> PositiveInt(absl::string_view key) const;
  absl::StatusOr<int64_t> IntOr(absl::string_view key, int64_t fallback) const;
  absl::StatusOr<double> Number(absl::string_view key) const;
  absl::StatusOr<std::string> String(absl::string_view key) const;
  absl::StatusOr<bool> Bool(absl::string_view key) const;
  absl::StatusOr<bool> BoolOr(absl::string_view key, bool fallback) const;
  // An int or a non-empty list of ints (eos_token_id is either).
  absl::StatusOr<std::vector<int64_t>> IntOrList(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> IntList(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> StringList(absl::string_view key) const;

 private:
  const nlohmann::json& obj_;
  std::string what_;
  std::string prefix_;
};

}  // namespace q38
