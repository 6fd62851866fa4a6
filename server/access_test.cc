#include "server/access.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace q38 {
namespace {

TEST(IsLocalPeer, LoopbackAndUnixSocketsOnly) {
  EXPECT_TRUE(IsLocalPeer("ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(IsLocalPeer("ipv6:[::1]:5000"));
  EXPECT_TRUE(IsLocalPeer("ipv6:%5B::1%5D:5000"));  // how gRPC 1.51 writes it
  EXPECT_TRUE(IsLocalPeer("ipv6:%5B::ffff:127.0.0.1%5D:5000"));
  EXPECT_TRUE(IsLocalPeer("unix:/run/q38.sock"));
  EXPECT_FALSE(IsLocalPeer("ipv4:10.0.0.1:5000"));
  EXPECT_FALSE(IsLocalPeer("ipv6:%5B::2%5D:5000"));
  EXPECT_FALSE(IsLocalPeer("ipv6:%5B::ffff:10.0.0.1%5D:5000"));
  EXPECT_FALSE(IsLocalPeer("ipv4:1127.0.0.1:5000"));
}

TEST(Access, RefusesMissingEmptyOrShortKeyFiles) {
  const std::string dir = ::testing::TempDir();
  EXPECT_FALSE(Access::Load({.api_key_file = dir + "/no-such-file"}).ok());
  std::ofstream(dir + "/empty") << "\n# only a comment\n";
  EXPECT_FALSE(Access::Load({.api_key_file = dir + "/empty"}).ok());
  std::ofstream(dir + "/short") << "abc\n";
  EXPECT_FALSE(Access::Load({.admin_key_file = dir + "/short"}).ok());
  EXPECT_FALSE(Access::Load({.tls_cert = dir + "/empty"}).ok());  // without --tls_key
  std::ofstream(dir + "/keys") << "# rotate by adding a line\n0123456789abcdef\nfedcba9876543210\n";
  absl::StatusOr<Access> a = Access::Load({.api_key_file = dir + "/keys"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->requires_api_key());
  EXPECT_FALSE(a->tls());
}

TEST(RedactForClients, DropsPidsAndPaths) {
  v1::Manifest m;
  m.set_model("/srv/models/qwen");
  m.set_bundle("/opt/q38/bundle-1");
  auto* w = m.add_workers();
  w->set_pid(1234);
  w->set_executable("/opt/q38/bundle-1/bin/q38-worker");
  w->set_build_id("abc");
  auto* o = w->add_mapped_objects();
  o->set_path("/usr/lib/x86_64-linux-gnu/libglog.so.1");
  o->set_sha256("def");
  const v1::Manifest r = RedactForClients(m);
  EXPECT_EQ(r.model(), "qwen");
  EXPECT_EQ(r.bundle(), "bundle-1");
  EXPECT_EQ(r.workers(0).pid(), 0);
  EXPECT_EQ(r.workers(0).executable(), "q38-worker");
  EXPECT_EQ(r.workers(0).build_id(), "abc");
  EXPECT_EQ(r.workers(0).mapped_objects(0).path(), "libglog.so.1");
  EXPECT_EQ(r.workers(0).mapped_objects(0).sha256(), "def");
}

}  // namespace
}  // namespace q38
