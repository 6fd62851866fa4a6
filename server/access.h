// Who may call what: TLS for the gRPC port (and /metrics), an optional API key on every public
// call, and the admin role (Drain, Shutdown, Benchmark, the unredacted manifest) for loopback and
// Unix-socket peers or holders of the admin key. Health checks stay open.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "q38/v1/q38.pb.h"

namespace q38 {

struct AccessOptions {
  std::string tls_cert, tls_key;        // PEM files; both or neither
  std::string api_key_file;             // keys, one per line; empty: public calls need none
  std::string admin_key_file;           // keys that make any peer an admin; empty: loopback only
  // Off where loopback is shared (a reverse proxy on the host): only the Unix socket and the admin key.
  bool loopback_is_admin = true;
};

class Access {
 public:
  // Reads the key and certificate files; a missing, unreadable or empty one is an error.
  static absl::StatusOr<Access> Load(const AccessOptions& options);

  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  bool tls() const { return !cert_pem_.empty(); }
  bool requires_api_key() const { return !api_keys_.empty(); }

  // OK for a public call; UNAUTHENTICATED (without the key's value) otherwise.
  absl::Status CheckUser(const grpc::ServerContextBase& ctx) const;
  // The same for the bearer token of an HTTP request (empty: none sent).
  absl::Status CheckUserToken(const std::string& token) const;
  // OK for an admin call; PERMISSION_DENIED naming how to become one otherwise.
  absl::Status CheckAdmin(const grpc::ServerContextBase& ctx) const;
  bool IsAdmin(const grpc::ServerContextBase& ctx) const;

 private:
  std::string cert_pem_, key_pem_;
  std::vector<std::string> api_keys_, admin_keys_;
  bool loopback_is_admin_ = true;
};

// A loopback or Unix-socket peer in gRPC's peer syntax (ipv4:127.0.0.1:5, ipv6:%5B::1%5D:5, unix:...).
bool IsLocalPeer(const std::string& peer);
// The bearer token of an "authorization: Bearer KEY" header, or empty.
std::string BearerToken(const grpc::ServerContextBase& ctx);
// The manifest without what only an operator needs: process ids and file-system paths.
v1::Manifest RedactForClients(v1::Manifest m);

}  // namespace q38
