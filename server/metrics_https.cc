#include "server/metrics_https.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/host_port.h"

namespace q38 {

absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> HttpsMetricsServer::Start(const std::string& address,
                                                                              const std::string& cert,
                                                                              const std::string& key,
                                                                              std::function<std::string()> render) {
  absl::StatusOr<HostPort> at = ParseHostPort(address);
  if (!at.ok()) return absl::InvalidArgumentError(absl::StrCat("metrics ", at.status().message()));
  const std::string& host = at->host;
  const int port = at->port;
  std::unique_ptr<HttpsMetricsServer> s(new HttpsMetricsServer());
  s->server_ = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
  if (!s->server_->is_valid()) return absl::InvalidArgumentError("metrics over TLS: the certificate or key is not usable");
  // Idle clients hold a thread only until the read timeout; enough threads keep the scraper served.
  s->server_->new_task_queue = [] { return new httplib::ThreadPool(16); };
  s->server_->set_read_timeout(3, 0);
  s->server_->Get("/metrics", [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4");
  });
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host.c_str()) : (s->server_->bind_to_port(host.c_str(), port) ? port : -1);
  if (s->port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  s->thread_ = std::thread([srv = s->server_.get()] { srv->listen_after_bind(); });
  return s;
}

HttpsMetricsServer::~HttpsMetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace q38
