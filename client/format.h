// Output helpers shared by the subcommands: aligned text tables, JSON text, names.
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"
#include "proto/proto_json.h"
#include "q38/v1/q38.pb.h"

namespace q38::client {

// Left-aligned columns separated by two spaces, a header row and a rule under it.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// JSON text; invalid UTF-8 in strings is replaced rather than thrown on.
std::string DumpJson(const nlohmann::json& j, int indent = 2);

}  // namespace q38::client
