#include "client/manifest.h"

#include "gtest/gtest.h"

namespace q38::client {
namespace {

v1::Manifest TwoWorkers() {
  v1::Manifest m;
  m.set_build_id("0123456789abcdef0123");
  m.set_model("qwen4_exp tiny");
  m.set_tp(2);
  for (int r = 0; r < 2; ++r) {
    v1::WorkerManifest* w = m.add_workers();
    w->set_rank(r);
    w->set_pid(1000 + r);
    w->mutable_device()->set_kind("cpu");
    w->set_build_id("0123456789abcdef0123");
    w->mutable_model()->set_fingerprint("sha256:fedcba9876543210fedc");
    w->mutable_model()->set_synthetic(r == 1);
    w->set_communicator("gloo");
    w->mutable_dtypes()->set_activation("F32");
    w->set_graph_mode("none");
    w->add_mapped_objects()->set_path("/lib/libglog.so.1");
  }
  return m;
}

TEST(Manifest, JsonRoundTripKeepsEveryFieldIncludingDefaults) {
  v1::Manifest m = TwoWorkers();
  m.mutable_workers(0)->mutable_model()->set_synthetic(false);
  const std::string json = ManifestToJson(m);
  EXPECT_NE(json.find("\"fingerprint\""), std::string::npos);
  EXPECT_NE(json.find("\"synthetic\": false"), std::string::npos);
  absl::StatusOr<v1::Manifest> back = ManifestFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), m.SerializeAsString());
}

TEST(Manifest, FromJsonIsStrict) {
  EXPECT_FALSE(ManifestFromJson("not json").ok());
  EXPECT_FALSE(ManifestFromJson(R"({"build_id": "x", "surprise": 1})").ok());
  EXPECT_TRUE(ManifestFromJson("{}").ok());
}

TEST(Manifest, ShortId) {
  EXPECT_EQ(ShortId("0123456789abcdef0123"), "0123456789ab");
  EXPECT_EQ(ShortId("sha256:fedcba9876543210fedc"), "fedcba987654");
  EXPECT_EQ(ShortId("short"), "short");
  EXPECT_EQ(ShortId("abcdef", 3), "abc");
}

TEST(Manifest, TableHasOneRowPerWorker) {
  const std::string table = FormatManifestTable(TwoWorkers());
  EXPECT_NE(table.find("build 0123456789abcdef0123  model qwen4_exp tiny  tp 2"), std::string::npos);
  EXPECT_NE(table.find("dtypes act/kv/gdn/conv"), std::string::npos);
  EXPECT_NE(table.find("F32/-/-/-"), std::string::npos);
  EXPECT_NE(table.find("fedcba987654"), std::string::npos);
  EXPECT_NE(table.find("1001"), std::string::npos);
  EXPECT_NE(table.find("yes"), std::string::npos);
  EXPECT_NE(table.find("gloo"), std::string::npos);
}

TEST(Manifest, DiffMatchesWorkersByRankAndHonoursIgnore) {
  v1::Manifest a = TwoWorkers();
  v1::Manifest b = TwoWorkers();
  std::swap(*b.mutable_workers(0), *b.mutable_workers(1));  // order does not matter
  b.mutable_workers(0)->set_pid(42);                         // rank 1's pid
  EXPECT_TRUE(DiffManifests(a, b, {"workers.pid"}).empty());

  std::vector<FieldDiff> d = DiffManifests(a, b, {});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "workers[rank=1].pid");
  EXPECT_EQ(d[0].a, "1001");
  EXPECT_EQ(d[0].b, "42");

  b.set_build_id("other");
  b.mutable_workers(1)->mutable_device()->set_kind("cuda");  // rank 0
  v1::WorkerManifest* extra = b.add_workers();
  extra->set_rank(2);
  d = DiffManifests(a, b, {"workers.pid"});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].path, "build_id");
  EXPECT_EQ(d[0].a, "\"0123456789abcdef0123\"");
  EXPECT_EQ(d[0].b, "\"other\"");
  EXPECT_EQ(d[1].path, "workers[rank=0].device.kind");
  EXPECT_EQ(d[2].path, "workers[rank=2]");
  EXPECT_EQ(d[2].a, "(absent)");
  EXPECT_EQ(d[2].b, "(present)");
}

}  // namespace
}  // namespace q38::client
