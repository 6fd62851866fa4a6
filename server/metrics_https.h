// /metrics over HTTPS. civetweb, which prometheus-cpp serves with, crashes on TLS as Debian builds it
// (it loads an OpenSSL API that OpenSSL 3 no longer has), so with --tls_cert the exposition is
// served by cpp-httplib's TLS server instead, from Metrics::Render.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class SSLServer;
}

namespace q38 {

class HttpsMetricsServer {
 public:
  // Serves `render()` at /metrics on host:port (port 0 picks one) with the PEM certificate and key.
  static absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> Start(const std::string& address, const std::string& cert,
                                                                   const std::string& key,
                                                                   std::function<std::string()> render);
  ~HttpsMetricsServer();  // stops serving and frees the port
  int port() const { return port_; }

 private:
  HttpsMetricsServer() = default;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace q38
