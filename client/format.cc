#include "client/format.h"

#include <algorithm>

namespace q38::client {

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < row.size(); ++i) {
      l += row[i];
      if (i + 1 < row.size()) l.append(widths[i] - row[i].size() + 2, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  for (size_t r = 0; r < rows_.size(); ++r) {
    line(rows_[r]);
    if (r == 0) {
      size_t total = 0;
      for (size_t i = 0; i < widths.size(); ++i) total += widths[i] + (i + 1 < widths.size() ? 2 : 0);
      out += std::string(total, '-') + "\n";
    }
  }
  return out;
}

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace q38::client
