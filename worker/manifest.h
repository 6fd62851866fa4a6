// One rank's manifest (docs/design.md §7): what it runs, on what, in which dtypes and routes, within
// which limits, with which libraries mapped. The worker fills a WorkerManifest from three places:
// the device backend (BackendManifest: the CPU one here; the CUDA backend sets its device identity,
// dtypes, routes and graph mode the same way), the run settings, and the process itself
// (GatherProcess). The coordinator checks it and serves it through GetManifest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "common/mapped_objects.h"
#include "kernels/backend.h"
#include "q38/v1/q38.pb.h"
#include "worker/checkpoint/tensor_store.h"

namespace q38 {

struct DeviceIdentity {
  std::string kind;  // cpu, cuda
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  std::string compute_capability;
  int64_t memory_bytes = 0;
};

// The dtypes actually used, as common/dtype names (F16, F32).
struct EffectiveDtypes {
  std::string activation;
  std::string kv_cache;
  std::string gdn_state;
  std::string conv_state;
};

// What the device backend decides.
struct BackendManifest {
  DeviceIdentity device;
  EffectiveDtypes dtypes;
  std::vector<std::string> routes;              // kernel routes in use
  std::vector<std::string> approximate_routes;  // opt-in approximate paths on (none by default)
  std::string graph_mode = "none";              // none, or e.g. FULL_AND_PIECEWISE
};

struct ModelIdentity {
  std::string model_type;
  std::string experts;      // nvfp4, bf16
  std::string fingerprint;  // SHA-256 over config.json, every tensor file's header and TensorDataDigest
  bool synthetic = false;   // config.json carries q38_synthetic (q38-make-checkpoint wrote it)
};

struct WorkerManifest {
  int rank = 0;
  int world = 1;
  int pid = 0;
  std::string executable;
  std::string build_id;  // SHA-256 of the executable
  BackendManifest backend;
  int64_t max_context = 0;
  int64_t prefill_chunk = 0;
  int max_num_seqs = 1;      // the engine holds one sequence
  bool mtp = false;          // no multi-token prediction
  bool prefix_cache = false; // no prefix cache
  std::string communicator;
  ModelIdentity model;
  std::vector<MappedObject> mapped_objects;
};

// The CPU reference: the backend's activations, FP32 caches and state, one exact route, no graphs.
BackendManifest CpuBackendManifest(const Backend& backend);

// `hash_threads`: threads hashing the tensor data (0: the machine's cores, at most 8); the
// fingerprint does not depend on it.
absl::StatusOr<ModelIdentity> IdentifyModel(const std::string& dir, const ModelConfig& config, const TensorStore& store,
                                            bool experts_nvfp4, int hash_threads = 0);

// The bytes hashed per task of TensorDataDigest.
inline constexpr size_t kTensorDataChunkBytes = size_t{16} << 20;
// SHA-256 (hex) over the SHA-256 (hex) of every `chunk_bytes` chunk of every file's data section,
// in file then chunk order; the chunks are hashed on `threads` threads, so the result is the same
// for any thread count.
std::string TensorDataDigest(const TensorStore& store, int threads, size_t chunk_bytes = kTensorDataChunkBytes);

// pid, executable, build id and the mapped shared objects of this process.
absl::Status GatherProcess(WorkerManifest& manifest);

v1::WorkerManifest ToProto(const WorkerManifest& manifest);
// Replaces the proto's mapped objects (a refreshed manifest).
void SetMappedObjects(const std::vector<MappedObject>& objects, v1::WorkerManifest& proto);

}  // namespace q38
