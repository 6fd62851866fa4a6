#include "server/rpc_guard.h"

#include <stdexcept>

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace q38 {
namespace {

TEST(Guarded, PassesTheHandlersStatusThrough) {
  EXPECT_TRUE(Guarded("GetInfo", [] { return grpc::Status::OK; }).ok());
  EXPECT_EQ(Guarded("GetInfo", [] { return grpc::Status(grpc::StatusCode::NOT_FOUND, "x"); }).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(Guarded, TurnsAThrowIntoAPreciseInternalStatus) {
  const grpc::Status s = Guarded("Benchmark", []() -> grpc::Status {
    return grpc::Status(grpc::StatusCode::OK, nlohmann::json::parse(R"(["x"])")[0].get<int>() ? "" : "");
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("Benchmark: internal error"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("type must be number"), std::string::npos) << s.error_message();
}

TEST(Guarded, CatchesThrowsOfAnyType) {
  const grpc::Status s = Guarded("Generate", []() -> grpc::Status { throw 42; });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("unknown type"), std::string::npos);
  EXPECT_EQ(Guarded("Drain", []() -> grpc::Status { throw std::runtime_error("boom"); }).error_message(),
            "Drain: internal error (boom); the server goes on serving");
}

}  // namespace
}  // namespace q38
