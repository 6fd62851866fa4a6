#include "client/client.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/support/client_interceptor.h"

namespace q38::client {
namespace {

void SetDeadline(grpc::ClientContext& ctx, std::chrono::duration<double> timeout) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout));
}

// Adds "authorization: Bearer KEY" to the initial metadata of every call.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string& key) : value_("Bearer " + key) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

class BearerFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerFactory(std::string key) : key_(std::move(key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(key_);
  }

 private:
  std::string key_;
};

}  // namespace

absl::Status FromGrpc(const grpc::Status& status) {
  // grpc::StatusCode and absl::StatusCode share their numbering (0..16).
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address, const ConnectOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("empty server address");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!options.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca;
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  }
  // The key rides every call as metadata, so it works over plaintext loopback as well as TLS.
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!options.api_key.empty()) interceptors.push_back(std::make_unique<BearerFactory>(options.api_key));
  auto channel = grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args, std::move(interceptors));
  if (!channel) return absl::InvalidArgumentError(absl::StrCat("cannot use address ", address));
  return std::make_unique<Client>(std::move(channel));
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      q38_(v1::Q38::NewStub(channel_)),
      health_(::grpc::health::v1::Health::NewStub(channel_)) {}

absl::StatusOr<GenerateResult> Client::Generate(
    const v1::GenerateRequest& request, std::optional<std::chrono::duration<double>> timeout,
    const std::function<void(const v1::GenerateResponse&)>& on_message) {
  grpc::ClientContext ctx;
  if (timeout) SetDeadline(ctx, *timeout);
  GenerateResult result;
  result.start = Clock::now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = q38_->Generate(&ctx, request);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    const Clock::time_point at = Clock::now();
    if (msg.token_ids_size() > 0) result.arrivals.push_back({at, msg.token_ids_size()});
    result.token_ids.insert(result.token_ids.end(), msg.token_ids().begin(), msg.token_ids().end());
    result.text += msg.text();
    result.logprobs.insert(result.logprobs.end(), msg.logprobs().begin(), msg.logprobs().end());
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      result.finish_reason = msg.finish_reason();
      result.usage = msg.usage();
      result.timings = msg.timings();
    }
    if (on_message) on_message(msg);
  }
  grpc::Status status = reader->Finish();
  result.end = Clock::now();
  if (!status.ok()) return FromGrpc(status);
  return result;
}

absl::Status Client::Benchmark(const v1::BenchmarkRequest& request, std::optional<std::chrono::duration<double>> timeout,
                               const std::function<void(const v1::BenchmarkProgress&)>& on_progress) {
  grpc::ClientContext ctx;
  if (timeout) SetDeadline(ctx, *timeout);
  std::unique_ptr<grpc::ClientReader<v1::BenchmarkProgress>> reader = q38_->Benchmark(&ctx, request);
  v1::BenchmarkProgress msg;
  while (reader->Read(&msg)) on_progress(msg);
  return FromGrpc(reader->Finish());
}

absl::StatusOr<v1::Manifest> Client::GetManifest(std::chrono::duration<double> timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  v1::Manifest out;
  grpc::Status status = q38_->GetManifest(&ctx, v1::GetManifestRequest(), &out);
  if (!status.ok()) return FromGrpc(status);
  return out;
}

absl::StatusOr<v1::Info> Client::GetInfo(std::chrono::duration<double> timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  v1::Info out;
  grpc::Status status = q38_->GetInfo(&ctx, v1::GetInfoRequest(), &out);
  if (!status.ok()) return FromGrpc(status);
  return out;
}

absl::StatusOr<::grpc::health::v1::HealthCheckResponse::ServingStatus> Client::CheckHealth(
    const std::string& service, std::chrono::duration<double> timeout) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout);
  ::grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  ::grpc::health::v1::HealthCheckResponse out;
  grpc::Status status = health_->Check(&ctx, req, &out);
  if (!status.ok()) return FromGrpc(status);
  return out.status();
}

}  // namespace q38::client
