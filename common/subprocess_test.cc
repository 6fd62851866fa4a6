#include "common/subprocess.h"

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(RunCommand, CapturesStdoutInTheGivenDirectory) {
  EXPECT_EQ(*RunCommand({"printf", "%s|", "a b", "c"}), "a b|c|");
  EXPECT_EQ(*RunCommand({"pwd"}, "/"), "/\n");
}

TEST(RunCommand, NonZeroExitNamesTheCommandAndCode) {
  absl::StatusOr<std::string> r = RunCommand({"sh", "-c", "exit 3"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("sh -c exit 3 exited with code 3"), std::string::npos) << r.status();
}

TEST(RunCommand, MissingProgramIsNotFound) {
  EXPECT_EQ(RunCommand({"q38-no-such-program"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RunCommand({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace q38
