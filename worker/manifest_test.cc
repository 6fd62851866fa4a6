#include "worker/manifest.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "tools/checkpoint/checkpoint_generator.h"

namespace q38 {
namespace {

TEST(WorkerManifest, CpuBackendReportsItsDeviceDtypesAndRoute) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  BackendManifest b = CpuBackendManifest(*cpu);
  EXPECT_EQ(b.device.kind, "cpu");
  EXPECT_GT(b.device.memory_bytes, 0);
  EXPECT_EQ(b.dtypes.activation, "F32");
  EXPECT_EQ(b.dtypes.kv_cache, "F32");
  EXPECT_EQ(b.dtypes.gdn_state, "F32");
  EXPECT_EQ(b.dtypes.conv_state, "F32");
  EXPECT_EQ(b.routes, std::vector<std::string>{cpu->name() + "_reference"});
  EXPECT_TRUE(b.approximate_routes.empty());
  EXPECT_EQ(b.graph_mode, "none");
}

TEST(WorkerManifest, ProcessFieldsComeFromThisProcess) {
  WorkerManifest m;
  ASSERT_TRUE(GatherProcess(m).ok());
  EXPECT_EQ(m.pid, getpid());
  EXPECT_EQ(m.build_id, *Sha256File("/proc/self/exe"));
  EXPECT_FALSE(m.executable.empty());
  EXPECT_FALSE(m.mapped_objects.empty());
}

TEST(WorkerManifest, ModelIdentityFingerprintsConfigAndHeaders) {
  const std::string dir = ::testing::TempDir() + "/manifest_tiny";
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 3}, dir).ok());
  const ModelConfig config = *LoadModelConfig(dir);
  auto store = *TensorStore::Open(dir);
  absl::StatusOr<ModelIdentity> id = IdentifyModel(dir, config, *store, true);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->model_type, "qwen4_exp");
  EXPECT_EQ(id->experts, "nvfp4");
  EXPECT_TRUE(id->synthetic);
  EXPECT_EQ(id->fingerprint.size(), 64u);
  EXPECT_EQ(IdentifyModel(dir, config, *store, false)->experts, "bf16");
}

// The fingerprint covers the weights: one flipped byte inside a tensor's data changes it, the same
// bytes give the same fingerprint, and the thread count does not matter.
TEST(WorkerManifest, ModelFingerprintCoversTensorData) {
  const std::string dir = ::testing::TempDir() + "/manifest_data";
  const std::string flipped = ::testing::TempDir() + "/manifest_data_flipped";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(flipped);
  ASSERT_TRUE(GenerateCheckpoint(TinyModelConfig(), {.seed = 3, .max_shard_bytes = 1 << 20}, dir).ok());
  std::filesystem::copy(dir, flipped);
  const ModelConfig config = *LoadModelConfig(dir);
  auto store = *TensorStore::Open(dir);
  ASSERT_GT(store->files().size(), 1u);  // sharded: several files in the digest

  // One byte in the middle of the last file's last tensor, found through the parsed header.
  const SafetensorsFile& last = *store->files().back();
  const TensorView& tensor = last.tensors().back();
  const size_t offset = 8 + last.header().size() + (tensor.data - reinterpret_cast<const uint8_t*>(last.data().data())) +
                        tensor.nbytes / 2;
  const std::string shard = flipped + "/" + std::filesystem::path(last.path()).filename().string();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    const char c = static_cast<char>(f.get());
    f.seekp(offset);
    f.put(static_cast<char>(c ^ 0x01));
  }
  auto flipped_store = *TensorStore::Open(flipped);  // still a valid checkpoint: headers unchanged

  const ModelIdentity a = *IdentifyModel(dir, config, *store, true);
  EXPECT_EQ(IdentifyModel(dir, config, *TensorStore::Open(dir).value(), true)->fingerprint, a.fingerprint);
  EXPECT_EQ(IdentifyModel(dir, config, *store, true, 1)->fingerprint, a.fingerprint);
  const ModelIdentity b = *IdentifyModel(flipped, config, *flipped_store, true);
  EXPECT_NE(b.fingerprint, a.fingerprint);
  EXPECT_TRUE(b.synthetic);  // still marked as the generator's

  // The digest's definition, with small chunks so that one file spans many, on 1 and 3 threads.
  std::string digests;
  for (const auto& f : store->files()) {
    for (size_t at = 0; at < f->data().size(); at += 4096) {
      const std::string_view chunk = f->data().substr(at, 4096);
      digests += Sha256Hex(absl::string_view(chunk.data(), chunk.size()));
    }
  }
  EXPECT_EQ(TensorDataDigest(*store, 1, 4096), Sha256Hex(digests));
  EXPECT_EQ(TensorDataDigest(*store, 3, 4096), Sha256Hex(digests));
  EXPECT_NE(TensorDataDigest(*flipped_store, 3, 4096), Sha256Hex(digests));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(flipped);
}

TEST(WorkerManifest, ToProtoCarriesEveryField) {
  WorkerManifest m;
  m.rank = 2;
  m.world = 4;
  m.pid = 77;
  m.executable = "/b/bin/q38-worker";
  m.build_id = "abc";
  m.backend = {{"cuda", "Tesla V100-SXM2-32GB", "GPU-1", "0000:1a:00.0", "7.0", 32LL << 30},
               {"F16", "F16", "F32", "F16"}, {"w4a16"}, {"lm_head_top1"}, "FULL_AND_PIECEWISE"};
  m.max_context = 262144;
  m.prefill_chunk = 8192;
  m.communicator = "nccl-2.21";
  m.model = {"qwen4_exp", "nvfp4", "fp", true};
  m.mapped_objects = {{"/b/lib/libx.so", "11"}};
  v1::WorkerManifest p = ToProto(m);
  EXPECT_EQ(p.rank(), 2);
  EXPECT_EQ(p.world(), 4);
  EXPECT_EQ(p.device().uuid(), "GPU-1");
  EXPECT_EQ(p.device().memory_bytes(), 32LL << 30);
  EXPECT_EQ(p.dtypes().gdn_state(), "F32");
  EXPECT_EQ(p.routes(0), "w4a16");
  EXPECT_EQ(p.approximate_routes(0), "lm_head_top1");
  EXPECT_EQ(p.graph_mode(), "FULL_AND_PIECEWISE");
  EXPECT_EQ(p.max_context(), 262144);
  EXPECT_EQ(p.prefill_chunk(), 8192);
  EXPECT_EQ(p.max_num_seqs(), 1);
  EXPECT_FALSE(p.mtp());
  EXPECT_FALSE(p.prefix_cache());
  EXPECT_EQ(p.communicator(), "nccl-2.21");
  EXPECT_TRUE(p.model().synthetic());
  EXPECT_EQ(p.mapped_objects(0).sha256(), "11");
}

}  // namespace
}  // namespace q38
