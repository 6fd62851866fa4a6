#include "server/rpc_guard.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace q38 {

grpc::Status Guarded(absl::string_view method, const std::function<grpc::Status()>& handler) {
  std::string what;
  try {
    return handler();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception of unknown type";
  }
  LOG(ERROR) << method << ": uncaught " << what;
  return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(method, ": internal error (", what, "); the server goes on serving"));
}

}  // namespace q38
