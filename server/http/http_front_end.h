// The OpenAI-compatible HTTP front door (docs/api.md) on cpp-httplib: /v1/models,
// /v1/completions, /v1/chat/completions (plain or server-sent events), /tokenize, /detokenize and
// /health. It parses OpenAI's bodies into the request the gRPC front door serves and runs them
// through the same lifecycle (server/generation.h): one queue, one set of metrics, one drain.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/access.h"
#include "server/generation.h"
#include "server/http/openai_request.h"
#include "server/service_info.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace q38::http {

struct HttpOptions {
  std::string address;       // host:port (port 0 picks one)
  std::string served_model;  // the model id clients name
  int64_t max_request_bytes = 1 << 20;
  std::string tls_cert, tls_key;  // PEM files: HTTPS when both are set
  int threads = 32;               // connections served at once (each streaming request holds one)
};

class HttpFrontEnd {
 public:
  static absl::StatusOr<std::unique_ptr<HttpFrontEnd>> Start(const HttpOptions& options, Generations& generations,
                                                             const Access& access, const ServiceInfo& info);
  ~HttpFrontEnd();  // stops listening and waits for the handlers (their requests have ended by then)

  int port() const { return port_; }
  // /health answers 200 only while serving.
  void SetServing(bool up) { serving_.store(up); }

 private:
  HttpFrontEnd(const HttpOptions& options, Generations& generations, const Access& access, const ServiceInfo& info);
  void Route();
  // /v1/completions and /v1/chat/completions, plain or streamed.
  void Complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);

  const HttpOptions options_;
  Generations& generations_;
  const Access& access_;
  const ServiceInfo& info_;
  const int64_t started_;  // /v1/models' "created"
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> serving_{false};
  std::atomic<uint64_t> next_id_{1};
  int port_ = 0;
};

}  // namespace q38::http
