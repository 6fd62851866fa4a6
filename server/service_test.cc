// The public gRPC service over a real gRPC server, a real Scheduler and fake ranks
// (server/testing/fake_worker_main.cc): Generate's tokens and last message, a malformed request
// refused before any rank sees it, and a client's cancel and deadline reaching the worker as
// cancels with their reasons.
#include "server/service.h"

#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "q38/v1/q38.grpc.pb.h"
#include "server/testing/fake_group.h"

namespace q38 {
namespace {

using fake::FakeGroup;
using fake::WaitFor;

class ServiceTest : public ::testing::Test {
 protected:
  // TP2 fake ranks whose every step takes `token_ms`, the scheduler over them, and the service
  // on a loopback port, as the coordinator wires them.
  void Start(int token_ms) {
    group_ = std::make_unique<FakeGroup>(2, absl::StrCat("token_ms=", token_ms));
    ASSERT_EQ(group_->supervisor().Start(absl::Seconds(10)), absl::OkStatus());
    scheduler_ = std::make_unique<Scheduler>(group_->supervisor(), metrics_, SchedulerOptions{});
    scheduler_->SetAvailable(true);
    absl::StatusOr<Access> access = Access::Load(AccessOptions{});
    ASSERT_TRUE(access.ok()) << access.status();
    access_.emplace(*std::move(access));
    info_.limits = {.vocab_size = 1000, .max_context = 4096};
    generations_ = std::make_unique<Generations>(*scheduler_, metrics_, info_);
    service_ = std::make_unique<Q38Service>(*scheduler_, metrics_, *access_, info_, *generations_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Q38::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (group_) group_->supervisor().KillAll();
    server_.reset();
    service_.reset();
    generations_.reset();
    scheduler_.reset();
    group_.reset();
  }

  static v1::GenerateRequest Tokens(std::vector<int32_t> prompt, int32_t max_tokens) {
    v1::GenerateRequest req;
    for (int32_t t : prompt) req.mutable_tokens()->add_ids(t);
    req.set_max_tokens(max_tokens);
    req.mutable_sampling()->set_temperature(0);
    return req;
  }

  // The id the scheduler gave the one request a test sent: the fake records it on its first line.
  std::string FirstRunLine() {
    const std::vector<std::string> events = group_->Events(0);
    return events.empty() ? "" : events[0];
  }

  Metrics metrics_{BuildInfo{}};
  ServiceInfo info_;
  std::unique_ptr<FakeGroup> group_;
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<Access> access_;
  std::unique_ptr<Generations> generations_;
  std::unique_ptr<Q38Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Q38::Stub> stub_;
};

TEST_F(ServiceTest, GenerateStreamsTheTokensThenTheFinishReasonAndUsage) {
  Start(0);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Tokens({3, 40}, 5));
  std::vector<int32_t> tokens;
  v1::GenerateResponse last;
  for (v1::GenerateResponse r; reader->Read(&r);) {
    tokens.insert(tokens.end(), r.token_ids().begin(), r.token_ids().end());
    last = r;
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(tokens, (std::vector<int32_t>{41, 42, 43, 44, 45}));
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 2);
  EXPECT_EQ(last.usage().completion_tokens(), 5);
}

TEST_F(ServiceTest, MalformedRequestIsInvalidArgumentAndNoRankRunsIt) {
  Start(0);
  for (v1::GenerateRequest req : {Tokens({}, 5), Tokens({1000}, 5), Tokens({1}, -1), Tokens({1}, 5000)}) {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << req.ShortDebugString() << ": " << s.error_message();
  }
  EXPECT_TRUE(group_->Events(0).empty());
  EXPECT_TRUE(group_->Events(1).empty());
}

TEST_F(ServiceTest, ClientCancelReachesTheWorkerAsAClientCancel) {
  Start(10);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Tokens({1}, 4000));
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));  // running
  ctx.TryCancel();
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const std::string run = FirstRunLine();
  ASSERT_EQ(run.rfind("run ", 0), 0u) << run;
  const std::string id = run.substr(4);
  ASSERT_TRUE(WaitFor([&] { return group_->Recorded(0, absl::StrCat("cancel ", id, " client")); }));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WaitFor([&] { return group_->Recorded(r, absl::StrCat("end ", id, " cancelled")); })) << r;
  }
}

TEST_F(ServiceTest, DeadlineIsDeadlineExceededAndReachesTheWorkerAsADeadlineCancel) {
  Start(10);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  auto reader = stub_->Generate(&ctx, Tokens({1}, 4000));
  for (v1::GenerateResponse r; reader->Read(&r);) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const std::string run = FirstRunLine();
  ASSERT_EQ(run.rfind("run ", 0), 0u) << run;
  EXPECT_TRUE(WaitFor([&] { return group_->Recorded(0, absl::StrCat("cancel ", run.substr(4), " deadline")); }))
      << absl::StrJoin(group_->Events(0), "; ");
  // The group is free again for the next request.
  ASSERT_TRUE(WaitFor([&] { return scheduler_->running() == 0; }));
  grpc::ClientContext next;
  auto again = stub_->Generate(&next, Tokens({1}, 2));
  for (v1::GenerateResponse r; again->Read(&r);) {
  }
  EXPECT_TRUE(again->Finish().ok());
}

}  // namespace
}  // namespace q38
