// A small synchronous client for the public q38 API: Generate with a callback per streamed
// message, Benchmark with a callback per progress message, GetManifest, GetInfo, and
// grpc.health.v1 Check. gRPC failures come back as
// absl::Status with the same code and message.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "q38/v1/q38.grpc.pb.h"

namespace q38::client {

using Clock = std::chrono::steady_clock;

absl::Status FromGrpc(const grpc::Status& status);

// One streamed message as it reached the client.
struct Arrival {
  Clock::time_point at;
  int tokens = 0;  // token ids the message carried
};

// The whole of one Generate stream. `finish_reason`, `usage` and `timings` are the server's, from
// the last message; `start` is when the call was issued and `end` when the stream closed.
struct GenerateResult {
  std::vector<int32_t> token_ids;
  std::vector<v1::TokenLogprob> logprobs;  // when the request asked
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  v1::Timings timings;
  Clock::time_point start;
  Clock::time_point end;
  std::vector<Arrival> arrivals;
};

// How to reach a server that wants TLS or an API key (q38-server --tls_cert, --api_key_file).
struct ConnectOptions {
  std::string tls_ca;           // PEM the server's certificate must chain to; empty: plaintext
  std::string tls_server_name;  // the name to check the certificate against, if not the address's host
  std::string api_key;          // sent as "authorization: Bearer KEY" on every call; empty: none
};

class Client {
 public:
  // `address` is anything grpc::CreateChannel takes: host:port, unix:/path. Nothing is dialed yet;
  // an unreachable server shows as UNAVAILABLE on the first call.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address, const ConnectOptions& options = {});
  explicit Client(std::shared_ptr<grpc::Channel> channel);

  // Streams one request. `on_message` (optional) sees every message as it arrives, before the
  // next is read. `timeout` (none when empty) becomes the call's deadline. On a failed stream the
  // status is returned; whatever arrived before the failure was already passed to `on_message`.
  absl::StatusOr<GenerateResult> Generate(
      const v1::GenerateRequest& request, std::optional<std::chrono::duration<double>> timeout,
      const std::function<void(const v1::GenerateResponse&)>& on_message = {});

  // Streams one Benchmark call; `on_progress` sees every message. The call's status comes back
  // after the last message (a failed benchmark still streamed its report first).
  absl::Status Benchmark(const v1::BenchmarkRequest& request, std::optional<std::chrono::duration<double>> timeout,
                         const std::function<void(const v1::BenchmarkProgress&)>& on_progress);

  absl::StatusOr<v1::Manifest> GetManifest(std::chrono::duration<double> timeout);
  absl::StatusOr<v1::Info> GetInfo(std::chrono::duration<double> timeout);
  // grpc.health.v1.Health/Check for `service` ("" is the server as a whole).
  absl::StatusOr<::grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
      const std::string& service, std::chrono::duration<double> timeout);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Q38::Stub> q38_;
  std::unique_ptr<::grpc::health::v1::Health::Stub> health_;
};

}  // namespace q38::client
