#include "server/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace q38 {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort hp;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" is not host:port"));
  }
  hp.host = address.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  return hp;
}

}  // namespace q38
