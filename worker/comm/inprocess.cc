// In-process collectives for tests: ranks are threads meeting at a barrier.
#include <barrier>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

#include "common/status.h"
#include "worker/comm/communicator.h"

namespace q38 {
namespace {

class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string version() const override { return "solo"; }
  absl::Status AllReduceSum(Tensor&) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor& in, Tensor& out) override {
    if (in.nbytes() != out.nbytes()) return absl::InvalidArgumentError("all-gather: output size differs from input");
    std::memmove(out.data, in.data, in.nbytes());
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
};

// What the ranks share: each publishes a pointer, all meet, each reads the others', all meet.
struct Shared {
  explicit Shared(int world) : barrier(world), slots(world) {}
  std::barrier<> barrier;
  std::vector<const void*> slots;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(shared_->slots.size()); }
  std::string version() const override { return "inprocess"; }

  absl::Status AllReduceSum(Tensor& t) override {
    ASSIGN_OR_RETURN(float* data, HostF32(t));
    const size_t n = t.numel();
    std::vector<float> sum(n, 0.0f);
    Exchange(data, [&] {
      for (const void* p : shared_->slots) {
        const float* other = static_cast<const float*>(p);
        for (size_t i = 0; i < n; ++i) sum[i] += other[i];
      }
    });
    std::memcpy(data, sum.data(), n * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status AllGather(const Tensor& in_t, Tensor& out_t) override {
    ASSIGN_OR_RETURN(const float* in, HostF32(in_t));
    ASSIGN_OR_RETURN(float* out, HostF32(out_t));
    const size_t n = in_t.numel();
    if (out_t.numel() != static_cast<int64_t>(n) * size()) return absl::InvalidArgumentError("all-gather: output is not world × input");
    Exchange(in, [&] {
      for (int r = 0; r < size(); ++r) std::memcpy(out + r * n, shared_->slots[r], n * sizeof(float));
    });
    return absl::OkStatus();
  }
  absl::Status Broadcast(void* data, size_t n, int root) override {
    std::vector<char> copy(n);
    Exchange(data, [&] { std::memcpy(copy.data(), shared_->slots[root], n); });
    std::memcpy(data, copy.data(), n);
    return absl::OkStatus();
  }

 private:
  // Publish `mine`, run `read` once every rank has published, and leave once every rank has read.
  template <typename Fn>
  void Exchange(const void* mine, Fn read) {
    shared_->slots[rank_] = mine;
    shared_->barrier.arrive_and_wait();
    read();
    shared_->barrier.arrive_and_wait();
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

absl::StatusOr<float*> HostF32(const Tensor& t) {
  if (t.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("collective on ", std::string(DTypeName(t.dtype)), ": this group reduces host F32"));
  }
  return t.as<float>();
}

std::unique_ptr<Communicator> MakeSoloCommunicator() { return std::make_unique<SoloCommunicator>(); }

std::vector<std::unique_ptr<Communicator>> MakeInProcessGroup(int world) {
  auto shared = std::make_shared<Shared>(world);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<InProcessCommunicator>(shared, r));
  return out;
}

}  // namespace q38
