// The CUDA IPC collectives on one GPU, ranks as threads of this process (the worker processes'
// handle exchange runs in the server tests and the collective bench): sums and gathers of every
// size and alignment against the host's rank-order FP32 sum, one-shot and two-shot, in pieces of a
// slot, inside a replayed CUDA graph, and a peer that never comes turning into UNAVAILABLE.
// Threads share the GPU's context, so each test allocates and frees only while every rank is idle
// (CudaGroupOptions::threads_share_gpu), and copies on the rank's stream. Skipped where no GPU is visible.
#include "worker/comm/cuda_group.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/dtype.h"

namespace q38 {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Rank {
  cudaStream_t stream = nullptr;
  std::unique_ptr<Communicator> comm;
  // Pinned, so that copies are plain DMA on the rank's stream: a pageable copy may be staged in a
  // way that waits on another rank's kernel, which waits on this rank.
  char* host = nullptr;
  static constexpr size_t kHostBytes = 1 << 20;
};

// Every rank here and idle: a device-wide synchronization (cudaMalloc, cudaFree) on one rank
// stalls no other's collective between two of these.
void Barrier(Communicator& c) {
  char b = 0;
  ASSERT_TRUE(c.Broadcast(&b, 1, 0).ok());
}

// Runs fn(rank) on `world` threads, each with its own stream and its member of one IPC group;
// `meet_at_end`: every rank idle before any frees its group (not where the group has failed).
void OnRanks(int world, CudaGroupOptions base, const std::function<void(int, Rank&)>& fn, bool meet_at_end = true) {
  std::vector<std::unique_ptr<Communicator>> hosts = MakeInProcessGroup(world);
  base.threads_share_gpu = true;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      Rank rank;
      ASSERT_EQ(cudaStreamCreateWithFlags(&rank.stream, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ(cudaMallocHost(&rank.host, Rank::kHostBytes), cudaSuccess);
      CudaGroupOptions o = base;
      o.stream = rank.stream;
      auto comm = ConnectCudaGroup(std::move(hosts[r]), o);
      ASSERT_TRUE(comm.ok()) << comm.status();
      rank.comm = std::move(*comm);
      fn(r, rank);
      cudaStreamSynchronize(rank.stream);
      if (meet_at_end) Barrier(*rank.comm);
      rank.comm.reset();
      cudaStreamDestroy(rank.stream);
      cudaFreeHost(rank.host);
    });
  }
  for (auto& t : threads) t.join();
}

// Rank r's input: values of either sign and of several magnitudes, so that the order of the sum shows.
std::vector<float> Input(int r, int64_t n, uint32_t seed) {
  std::mt19937 g(seed * 31 + r);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g) * (1 << (g() % 12));
  return v;
}

// The host's sum in rank order from zero, in FP32, rounded once to `dtype` and back.
std::vector<float> Expected(int world, int64_t n, uint32_t seed, DType dtype) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < world; ++r) {
    std::vector<float> in = Input(r, n, seed);
    for (int64_t i = 0; i < n; ++i) sum[i] += dtype == DType::kF16 ? Fp16ToFloat(FloatToFp16(in[i])) : in[i];
  }
  if (dtype == DType::kF16) {
    for (float& x : sum) x = Fp16ToFloat(FloatToFp16(x));
  }
  return sum;
}

// Device memory, allocated while every rank is idle.
void* Allocate(Rank& rank, size_t bytes) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  Barrier(*rank.comm);
  return d;
}
void Free(Rank& rank, void* d) {
  cudaStreamSynchronize(rank.stream);
  Barrier(*rank.comm);
  cudaFree(d);
  Barrier(*rank.comm);
}

// Host floats to and from device storage of `dtype`, through the rank's pinned buffer and stream.
void Upload(Rank& rank, const std::vector<float>& v, DType dtype, void* d) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(rank.host)[i] = v[i];
    } else {
      reinterpret_cast<uint16_t*>(rank.host)[i] = FloatToFp16(v[i]);
    }
  }
  cudaMemcpyAsync(d, rank.host, v.size() * DTypeSize(dtype), cudaMemcpyHostToDevice, rank.stream);
  cudaStreamSynchronize(rank.stream);
}
std::vector<float> Download(Rank& rank, const void* d, int64_t n, DType dtype) {
  cudaMemcpyAsync(rank.host, d, n * DTypeSize(dtype), cudaMemcpyDeviceToHost, rank.stream);
  cudaStreamSynchronize(rank.stream);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = dtype == DType::kF32 ? reinterpret_cast<float*>(rank.host)[i]
                                : Fp16ToFloat(reinterpret_cast<uint16_t*>(rank.host)[i]);
  }
  return v;
}

int64_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

TEST(CudaGroup, SumsEverySizeInRankOrderOneShotAndTwoShot) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  // A slot of 64 KiB, so that the larger sizes go in several pieces.
  const std::vector<int64_t> sizes = {1, 7, 8, 9, 1000, 2560, 10240, 40000, 100003};
  for (int world : {2, 3, 4}) {
    for (size_t two_shot : {std::numeric_limits<size_t>::max(), size_t{0}}) {
      OnRanks(world, {.timeout_ms = 10000, .route = "ipc", .slot_bytes = 64 << 10, .two_shot_bytes = two_shot},
              [&](int r, Rank& rank) {
                EXPECT_NE(rank.comm->version().find("cuda-ipc"), std::string::npos) << rank.comm->version();
                void* d = Allocate(rank, sizes.back() * 4);
                for (DType dtype : {DType::kF16, DType::kF32}) {
                  for (int64_t n : sizes) {
                    const uint32_t seed = static_cast<uint32_t>(n * 7 + world);
                    Upload(rank, Input(r, n, seed), dtype, d);
                    Tensor t{d, dtype, {n}};
                    ASSERT_TRUE(rank.comm->AllReduceSum(t).ok());
                    EXPECT_EQ(Differing(Download(rank, d, n, dtype), Expected(world, n, seed, dtype)), 0)
                        << "world " << world << " n " << n << " " << DTypeName(dtype)
                        << (two_shot == 0 ? " two-shot" : " one-shot") << " rank " << r;
                  }
                }
                Free(rank, d);
              });
    }
  }
}

TEST(CudaGroup, GathersEverySizeAndAlignment) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  for (int world : {2, 4}) {
    OnRanks(world, {.timeout_ms = 10000, .route = "ipc", .slot_bytes = 4096}, [&](int r, Rank& rank) {
      void* in = Allocate(rank, 10000);
      void* out = Allocate(rank, 10000 * world);
      for (size_t bytes : {size_t{8}, size_t{100}, size_t{4096}, size_t{10000}}) {
        std::vector<uint8_t> mine(bytes);
        for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(i * 13 + r * 101);
        std::copy(mine.begin(), mine.end(), rank.host);
        cudaMemcpyAsync(in, rank.host, bytes, cudaMemcpyHostToDevice, rank.stream);
        // U8 views: the gather moves bytes whatever the element type.
        Tensor a{in, DType::kU8, {static_cast<int64_t>(bytes)}}, b{out, DType::kU8, {static_cast<int64_t>(bytes) * world}};
        ASSERT_TRUE(rank.comm->AllGather(a, b).ok());
        cudaMemcpyAsync(rank.host, out, bytes * world, cudaMemcpyDeviceToHost, rank.stream);
        cudaStreamSynchronize(rank.stream);
        const std::vector<uint8_t> all(rank.host, rank.host + bytes * world);
        for (int q = 0; q < world; ++q) {
          for (size_t i = 0; i < bytes; ++i) {
            ASSERT_EQ(all[q * bytes + i], static_cast<uint8_t>(i * 13 + q * 101)) << bytes << " bytes, from rank " << q;
          }
        }
      }
      Free(rank, in);
      Free(rank, out);
      int32_t token = r == world - 1 ? 4242 : -1;
      ASSERT_TRUE(rank.comm->Broadcast(&token, sizeof(token), world - 1).ok());
      EXPECT_EQ(token, 4242);
    });
  }
}

TEST(CudaGroup, GraphReplaysAdvanceTheSequence) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  // All-reduces of different sizes recorded once; every replay over fresh inputs must sum them
  // again, which holds only if the counters move on inside the replay. 40000 then 8100 elements:
  // the one block of the second covers part of the first's second block, whose slot it must not
  // refill while a peer still reads it.
  const std::vector<int64_t> sizes = {2560, 9, 40000, 8100};
  OnRanks(2, {.timeout_ms = 10000, .route = "ipc", .two_shot_bytes = 32 << 10}, [&](int r, Rank& rank) {
    std::vector<void*> d;
    for (int64_t n : sizes) d.push_back(Allocate(rank, n * 2));
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(rank.stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
    for (size_t k = 0; k < sizes.size(); ++k) {
      Tensor t{d[k], DType::kF16, {sizes[k]}};
      ASSERT_TRUE(rank.comm->AllReduceSum(t).ok());
    }
    ASSERT_EQ(cudaStreamEndCapture(rank.stream, &graph), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    Barrier(*rank.comm);
    for (uint32_t replay = 2; replay < 7; ++replay) {
      for (size_t k = 0; k < sizes.size(); ++k) Upload(rank, Input(r, sizes[k], replay), DType::kF16, d[k]);
      ASSERT_EQ(cudaGraphLaunch(exec, rank.stream), cudaSuccess);
      for (size_t k = 0; k < sizes.size(); ++k) {
        EXPECT_EQ(Differing(Download(rank, d[k], sizes[k], DType::kF16), Expected(2, sizes[k], replay, DType::kF16)), 0)
            << "replay " << replay << " size " << sizes[k];
      }
    }
    cudaStreamSynchronize(rank.stream);
    Barrier(*rank.comm);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (void* p : d) Free(rank, p);
  });
}

TEST(CudaGroup, APeerThatNeverComesIsUnavailableNotAHang) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  OnRanks(2, {.timeout_ms = 500, .route = "ipc"}, [&](int r, Rank& rank) {
    void* d = Allocate(rank, 2560 * 2);
    void* g = Allocate(rank, 16);
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));  // joins no collective
      cudaFree(d);
      cudaFree(g);
      return;
    }
    Upload(rank, Input(0, 2560, 1), DType::kF16, d);
    Tensor t{d, DType::kF16, {2560}}, one{d, DType::kF32, {2}}, two{g, DType::kF32, {4}};
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(rank.comm->AllReduceSum(t).ok());  // queued; its wait gives up on the device
    const absl::Status gathered = rank.comm->AllGather(one, two);
    EXPECT_TRUE(absl::IsUnavailable(gathered)) << gathered;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    // Every later collective fails at once, and the stream is free again.
    EXPECT_TRUE(absl::IsUnavailable(rank.comm->AllReduceSum(t)));
    EXPECT_EQ(cudaStreamSynchronize(rank.stream), cudaSuccess);
    cudaFree(d);
    cudaFree(g);
  }, /*meet_at_end=*/false);
}

TEST(CudaGroup, ThreadsOnOneGpuAreRefusedUnlessTheyKeepClear) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  std::vector<std::unique_ptr<Communicator>> hosts = MakeInProcessGroup(2);
  std::vector<absl::Status> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      got[r] = ConnectCudaGroup(std::move(hosts[r]), {.timeout_ms = 10000}).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : got) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("threads of one process on one GPU"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace q38
