// Status plumbing shared by every part: absl::Status at module and process edges.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define Q38_CONCAT_INNER(a, b) a##b
#define Q38_CONCAT(a, b) Q38_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status q38_status_ = (expr);             \
    if (!q38_status_.ok()) return q38_status_;       \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` binds the value of an absl::StatusOr or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  Q38_ASSIGN_OR_RETURN_IMPL(Q38_CONCAT(q38_statusor_, __COUNTER__), lhs, expr)
#define Q38_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
