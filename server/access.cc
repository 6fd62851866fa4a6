#include "server/access.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "openssl/crypto.h"

namespace q38 {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  return ss.str();
}

absl::StatusOr<std::vector<std::string>> ReadKeys(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = ReadWhole(path, flag);
  if (!text.ok()) return text.status();
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.size() < 16) return absl::InvalidArgumentError(absl::StrCat(flag, ": a key in ", path, " is shorter than 16 characters"));
    keys.emplace_back(line);
  }
  if (keys.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no key"));
  return keys;
}

// Compares in time that does not depend on where the strings differ.
bool AnyKeyMatches(const std::vector<std::string>& keys, const std::string& token) {
  bool match = false;
  for (const std::string& k : keys) {
    match |= k.size() == token.size() && CRYPTO_memcmp(k.data(), token.data(), k.size()) == 0;
  }
  return match;
}

}  // namespace

absl::StatusOr<Access> Access::Load(const AccessOptions& o) {
  Access a;
  a.loopback_is_admin_ = o.loopback_is_admin;
  if (o.tls_cert.empty() != o.tls_key.empty()) return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  if (!o.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadWhole(o.tls_cert, "--tls_cert"), key = ReadWhole(o.tls_key, "--tls_key");
    if (!cert.ok()) return cert.status();
    if (!key.ok()) return key.status();
    a.cert_pem_ = *cert;
    a.key_pem_ = *key;
  }
  if (!o.api_key_file.empty()) {
    absl::StatusOr<std::vector<std::string>> keys = ReadKeys(o.api_key_file, "--api_key_file");
    if (!keys.ok()) return keys.status();
    a.api_keys_ = *std::move(keys);
  }
  if (!o.admin_key_file.empty()) {
    absl::StatusOr<std::vector<std::string>> keys = ReadKeys(o.admin_key_file, "--admin_key_file");
    if (!keys.ok()) return keys.status();
    a.admin_keys_ = *std::move(keys);
  }
  return a;
}

std::shared_ptr<grpc::ServerCredentials> Access::ServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

bool IsLocalPeer(const std::string& peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D") ||
         absl::StartsWith(peer, "ipv6:[::ffff:127.") || absl::StartsWith(peer, "ipv6:%5B::ffff:127.");
}

std::string BearerToken(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  const std::string value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  return absl::StartsWith(value, kBearer) ? value.substr(kBearer.size()) : "";
}

bool Access::IsAdmin(const grpc::ServerContextBase& ctx) const {
  const std::string peer = ctx.peer();
  if (absl::StartsWith(peer, "unix:") || (loopback_is_admin_ && IsLocalPeer(peer))) return true;
  return !admin_keys_.empty() && AnyKeyMatches(admin_keys_, BearerToken(ctx));
}

absl::Status Access::CheckUser(const grpc::ServerContextBase& ctx) const { return CheckUserToken(BearerToken(ctx)); }

absl::Status Access::CheckUserToken(const std::string& token) const {
  if (api_keys_.empty()) return absl::OkStatus();
  if (AnyKeyMatches(api_keys_, token) || (!admin_keys_.empty() && AnyKeyMatches(admin_keys_, token))) return absl::OkStatus();
  return absl::UnauthenticatedError(token.empty() ? "this server needs an API key: send \"authorization: Bearer KEY\""
                                                  : "the API key is not valid");
}

absl::Status Access::CheckAdmin(const grpc::ServerContextBase& ctx) const {
  if (IsAdmin(ctx)) return absl::OkStatus();
  return absl::PermissionDeniedError(loopback_is_admin_ ? "admin calls only from loopback, a Unix socket, or with the admin key"
                                                        : "admin calls only from a Unix socket or with the admin key");
}

v1::Manifest RedactForClients(v1::Manifest m) {
  auto base = [](const std::string& p) { return std::filesystem::path(p).filename().string(); };
  m.set_model(base(m.model()));
  m.set_bundle(base(m.bundle()));
  for (auto& w : *m.mutable_workers()) {
    w.set_pid(0);
    w.set_executable(base(w.executable()));
    for (auto& o : *w.mutable_mapped_objects()) o.set_path(base(o.path()));
  }
  return m;
}

}  // namespace q38
