// PeerSocket finds a live connection by its addresses and sees its peer hang up.
#include "server/http/peer_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace q38::http {
namespace {

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

TEST(PeerSocket, FindsTheConnectionAndSeesThePeerLeave) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const int served = accept(listener, nullptr, nullptr);
  ASSERT_GE(served, 0);

  const PeerSocket found = PeerSocket::Find("127.0.0.1", Port(served, false), "127.0.0.1", Port(served, true));
  ASSERT_TRUE(found.valid());
  EXPECT_FALSE(found.Closed());
  // Another peer port names no connection; an unknown one is never "closed".
  const PeerSocket none = PeerSocket::Find("127.0.0.1", Port(served, false), "127.0.0.1", Port(served, true) ^ 1);
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(none.Closed());
  close(client);
  for (int i = 0; i < 100 && !found.Closed(); ++i) usleep(10000);
  EXPECT_TRUE(found.Closed());
  close(served);
  close(listener);
}

}  // namespace
}  // namespace q38::http
