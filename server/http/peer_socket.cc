#include "server/http/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace q38::http {
namespace {

// The numeric host and port of a socket address, as cpp-httplib reports them.
bool Numeric(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool Matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !Numeric(addr, len, &host, &port)) return false;
  if (host != remote_addr || port != remote_port) return false;
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !Numeric(addr, len, &host, &port)) return false;
  return host == local_addr && port == local_port;
}

}  // namespace

PeerSocket PeerSocket::Find(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return PeerSocket(-1);
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (Matches(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return PeerSocket(found);
}

bool PeerSocket::Closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace q38::http
