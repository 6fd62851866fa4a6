#include "worker/manifest.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/sha256.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace q38 {
namespace {

// "model name" of the first processor in /proc/cpuinfo; empty when absent (not every arch has it).
std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "";
}

}  // namespace

BackendManifest CpuBackendManifest(const Backend& backend) {
  BackendManifest m;
  m.device.kind = "cpu";
  m.device.name = CpuModel();
  m.device.memory_bytes = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  const std::string f32(DTypeName(DType::kF32));
  m.dtypes = {std::string(DTypeName(backend.act_dtype())), f32, f32, f32};  // docs/design.md §4, CPU column
  m.routes = {backend.name() == "cpu" ? "cpu_reference" : backend.name()};  // cpu_fast: kernels/backend.h CpuMath
  return m;
}

std::string TensorDataDigest(const TensorStore& store, int threads, size_t chunk_bytes) {
  std::vector<std::string_view> chunks;
  for (const auto& f : store.files()) {
    const std::string_view data = f->data();
    for (size_t at = 0; at < data.size(); at += chunk_bytes) chunks.push_back(data.substr(at, chunk_bytes));
  }
  std::vector<std::string> digests(chunks.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < chunks.size();) {
      digests[i] = Sha256Hex(absl::string_view(chunks[i].data(), chunks[i].size()));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(chunks.size())); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::string all;
  for (const std::string& d : digests) all += d;
  return Sha256Hex(all);
}

absl::StatusOr<ModelIdentity> IdentifyModel(const std::string& dir, const ModelConfig& config, const TensorStore& store,
                                            bool experts_nvfp4, int hash_threads) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
  ModelIdentity m;
  m.model_type = config.model_type;
  m.experts = experts_nvfp4 ? "nvfp4" : "bf16";
  m.synthetic = nlohmann::json::parse(text, nullptr, false).contains("q38_synthetic");
  for (const auto& f : store.files()) text += f->header();
  // The weights themselves, so that a corrupted byte changes what the manifest says ran.
  if (hash_threads <= 0) hash_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  text += TensorDataDigest(store, hash_threads);
  m.fingerprint = Sha256Hex(text);
  return m;
}

absl::Status GatherProcess(WorkerManifest& m) {
  m.pid = getpid();
  std::error_code ec;
  m.executable = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  ASSIGN_OR_RETURN(m.build_id, Sha256File("/proc/self/exe"));
  ASSIGN_OR_RETURN(m.mapped_objects, MappedSharedObjects());
  return absl::OkStatus();
}

v1::WorkerManifest ToProto(const WorkerManifest& m) {
  v1::WorkerManifest p;
  p.set_rank(m.rank);
  p.set_pid(m.pid);
  p.set_world(m.world);
  p.set_executable(m.executable);
  p.set_build_id(m.build_id);
  const DeviceIdentity& d = m.backend.device;
  v1::DeviceIdentity* pd = p.mutable_device();
  pd->set_kind(d.kind);
  pd->set_name(d.name);
  pd->set_uuid(d.uuid);
  pd->set_pci_bus_id(d.pci_bus_id);
  pd->set_compute_capability(d.compute_capability);
  pd->set_memory_bytes(d.memory_bytes);
  const EffectiveDtypes& t = m.backend.dtypes;
  p.mutable_dtypes()->set_activation(t.activation);
  p.mutable_dtypes()->set_kv_cache(t.kv_cache);
  p.mutable_dtypes()->set_gdn_state(t.gdn_state);
  p.mutable_dtypes()->set_conv_state(t.conv_state);
  for (const std::string& r : m.backend.routes) p.add_routes(r);
  for (const std::string& r : m.backend.approximate_routes) p.add_approximate_routes(r);
  p.set_graph_mode(m.backend.graph_mode);
  p.set_max_context(m.max_context);
  p.set_prefill_chunk(m.prefill_chunk);
  p.set_max_num_seqs(m.max_num_seqs);
  p.set_mtp(m.mtp);
  p.set_prefix_cache(m.prefix_cache);
  p.set_communicator(m.communicator);
  p.mutable_model()->set_model_type(m.model.model_type);
  p.mutable_model()->set_experts(m.model.experts);
  p.mutable_model()->set_fingerprint(m.model.fingerprint);
  p.mutable_model()->set_synthetic(m.model.synthetic);
  SetMappedObjects(m.mapped_objects, p);
  return p;
}

void SetMappedObjects(const std::vector<MappedObject>& objects, v1::WorkerManifest& proto) {
  proto.clear_mapped_objects();
  for (const MappedObject& o : objects) {
    v1::MappedObject* po = proto.add_mapped_objects();
    po->set_path(o.path);
    po->set_sha256(o.sha256);
  }
}

}  // namespace q38
