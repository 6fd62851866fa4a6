// "host:port" listen addresses ("[::1]:80" for IPv6; port 0 picks one) for the HTTP servers.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace q38 {

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;
};

absl::StatusOr<HostPort> ParseHostPort(const std::string& address);

}  // namespace q38
