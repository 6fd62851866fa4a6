// No exception crosses an RPC boundary: a handler that throws answers INTERNAL naming the method
// and the error, the log keeps it, and the server goes on serving.
#pragma once

#include <functional>
#include "absl/strings/string_view.h"

#include "grpcpp/grpcpp.h"

namespace q38 {

grpc::Status Guarded(absl::string_view method, const std::function<grpc::Status()>& handler);

}  // namespace q38
