// Whether an HTTP client is still there while its request runs. cpp-httplib 0.11 gives a handler
// the connection's addresses but not its socket, and a client that leaves is only noticed when a
// write fails, which a non-streaming request never tries before its end. The socket is found by
// its two addresses among this process's descriptors (unique while the connection lives), and a
// poll for the peer's hang-up tells whether it left.
#pragma once

#include <string>

namespace q38::http {

class PeerSocket {
 public:
  // The connected socket whose local and remote addresses are these (numeric hosts); invalid when
  // none is found.
  static PeerSocket Find(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool valid() const { return fd_ >= 0; }
  // The peer hung up or the connection failed (never true for an invalid one: nothing is known).
  bool Closed() const;

 private:
  explicit PeerSocket(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace q38::http
