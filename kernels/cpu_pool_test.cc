// The fast CPU backend's worker threads: every part runs once per Run, on as many threads as
// asked, back to back and after the workers have gone to sleep; and a product split over threads
// is bitwise the product on one.
#include "kernels/cpu_pool.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/testing/op_test_util.h"

namespace q38 {
namespace {

TEST(CpuPool, EveryPartOnceOnItsOwnThread) {
  for (int threads : {1, 2, 3}) {
    CpuPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int run = 0; run < 200; ++run) {
      std::vector<int> calls(threads, 0);
      std::set<std::thread::id> ids;
      std::mutex mu;
      pool.Run([&](int part) {
        std::lock_guard<std::mutex> l(mu);
        ++calls[part];
        ids.insert(std::this_thread::get_id());
      });
      EXPECT_EQ(calls, std::vector<int>(threads, 1)) << "threads " << threads << " run " << run;
      EXPECT_EQ(ids.size(), static_cast<size_t>(threads));
      // Now and then let the workers fall asleep before the next run.
      if (run % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

Buffer Upload(Backend& b, const std::vector<float>& v, std::vector<int64_t> shape) { return b.Upload(v, std::move(shape)); }

TEST(CpuPool, ProductsOverThreadsAreBitwiseOneThreads) {
  auto one = MakeCpuBackend(CpuMath::kFast, 1), three = MakeCpuBackend(CpuMath::kFast, 3);
  // Above and below the size worth splitting; N not a multiple of the parts' rows.
  for (const auto& [T, K, N] : std::vector<std::array<int64_t, 3>>{{1, 256, 4099}, {3, 300, 1001}, {1, 64, 40}, {2, 256, 7}}) {
    const std::vector<float> x = cpu::op_test::Uniform(T * K, 31), w = cpu::op_test::Uniform(N * K, 32);
    std::vector<float> y1(T * N), y3(T * N);
    for (auto* pair : {&y1, &y3}) {
      Backend& b = pair == &y1 ? *one : *three;
      Buffer xb = Upload(b, x, {T, K}), wb = Upload(b, w, {N, K}), yb = b.Alloc(DType::kF32, {T, N});
      b.Fill(yb.t(), NAN);
      b.Linear(xb.t(), wb.t(), yb.t());
      b.CopyToHost(yb.t(), pair->data());
    }
    EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0) << T << "×" << K << "×" << N;
    for (float v : y3) ASSERT_FALSE(std::isnan(v)) << T << "×" << K << "×" << N;
  }
}

TEST(CpuPool, ThreadsPerRankShareTheCores) {
  EXPECT_GE(CpuThreadsPerRank(1), 1);
  EXPECT_EQ(CpuThreadsPerRank(1 << 20), 1);
  EXPECT_LE(CpuThreadsPerRank(2), std::max(1u, std::thread::hardware_concurrency() / 2));
}

}  // namespace
}  // namespace q38
