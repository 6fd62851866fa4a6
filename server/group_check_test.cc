#include "server/group_check.h"

#include <gtest/gtest.h>

namespace q38 {
namespace {

std::vector<worker::v1::WorkerInfo> Group(int n) {
  std::vector<worker::v1::WorkerInfo> infos(n);
  for (int r = 0; r < n; ++r) {
    infos[r].set_rank(r);
    infos[r].set_world(n);
    v1::WorkerManifest* m = infos[r].mutable_manifest();
    m->set_rank(r);
    m->set_pid(100 + r);
    m->set_build_id("build");
    m->mutable_model()->set_fingerprint("model");
    v1::MappedObject* o = m->add_mapped_objects();
    o->set_path("/b/lib/libglog.so.1");
    o->set_sha256("g");
    v1::MappedObject* libc = m->add_mapped_objects();
    libc->set_path("/lib/x86_64-linux-gnu/libc.so.6");
    libc->set_sha256("c");
  }
  return infos;
}

void ExpectRefused(const std::vector<worker::v1::WorkerInfo>& infos, int tp, const std::string& words) {
  absl::Status s = CheckGroup(infos, tp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << words;
  EXPECT_NE(s.message().find(words), std::string::npos) << s;
}

TEST(GroupCheck, AcceptsRanksZeroToNOnceWithOneBuildModelAndLibraries) {
  std::vector<worker::v1::WorkerInfo> g = Group(4);
  std::swap(g[0], g[3]);  // order does not matter
  g[1].mutable_manifest()->mutable_mapped_objects(1)->set_sha256("other libc");  // the C library's may differ
  EXPECT_TRUE(CheckGroup(g, 4).ok()) << CheckGroup(g, 4);
  const v1::Manifest m = MakeManifest(g, "/m", 4);
  ASSERT_EQ(m.workers_size(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(m.workers(r).rank(), r);
  EXPECT_EQ(m.build_id(), "build");
}

TEST(GroupCheck, RefusesMissingDuplicateOrMisnumberedRanks) {
  std::vector<worker::v1::WorkerInfo> g = Group(4);
  g[3].set_rank(2);
  g[3].mutable_manifest()->set_rank(2);
  ExpectRefused(g, 4, "rank 2 appears twice");
  g = Group(4);
  g.pop_back();
  for (auto& i : g) i.set_world(4);
  ExpectRefused(g, 4, "ranks present: 3 of 4");
  g = Group(4);
  g[2].set_world(2);
  ExpectRefused(g, 4, "rank 2 thinks the group has 2 ranks, not 4");
  g = Group(4);
  g[1].mutable_manifest()->set_rank(3);
  ExpectRefused(g, 4, "rank 1 reports rank 3 in its manifest");
}

TEST(GroupCheck, RefusesOtherBuildsModelsOrLibraries) {
  std::vector<worker::v1::WorkerInfo> g = Group(2);
  g[1].mutable_manifest()->set_build_id("other");
  ExpectRefused(g, 2, "rank 1 runs build other, rank 0 runs build");
  g = Group(2);
  g[1].mutable_manifest()->mutable_model()->set_fingerprint("other");
  ExpectRefused(g, 2, "rank 1 loaded a different model");
  g = Group(2);
  g[1].mutable_manifest()->mutable_mapped_objects(0)->set_sha256("patched");
  ExpectRefused(g, 2, "rank 1 maps other shared objects than rank 0");
}

}  // namespace
}  // namespace q38
