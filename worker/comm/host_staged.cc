#include "worker/comm/host_staged.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace q38 {
namespace {

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream)
      : host_(std::move(host)), stream_(stream) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string version() const override { return "host-staged " + host_->version(); }

  absl::Status AllReduceSum(Tensor& t) override {
    ASSIGN_OR_RETURN(std::vector<float> v, Fetch(t));
    Tensor h{v.data(), DType::kF32, {t.numel()}};
    RETURN_IF_ERROR(host_->AllReduceSum(h));
    return Store(v, t);
  }
  absl::Status AllGather(const Tensor& in, Tensor& out) override {
    if (out.numel() != in.numel() * size() || out.dtype != in.dtype) {
      return absl::InvalidArgumentError("all-gather: output is not world × input");
    }
    ASSIGN_OR_RETURN(std::vector<float> mine, Fetch(in));
    std::vector<float> all(out.numel());
    Tensor a{mine.data(), DType::kF32, {in.numel()}}, b{all.data(), DType::kF32, {out.numel()}};
    RETURN_IF_ERROR(host_->AllGather(a, b));
    return Store(all, out);
  }
  absl::Status Broadcast(void* data, size_t n, int root) override { return host_->Broadcast(data, n, root); }

 private:
  static absl::Status Cuda(cudaError_t e, absl::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("host-staged ", what, ": ", cudaGetErrorString(e)));
  }
  static absl::Status Supported(const Tensor& t) {
    if (t.dtype == DType::kF32 || t.dtype == DType::kF16) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("host-staged: no collective on ", std::string(DTypeName(t.dtype))));
  }
  // Copies on the rank's stream, then waits for it: the copy follows the work that produced the
  // tensor, the work after it follows the copy, and the host buffer outlives the copy.
  absl::Status Copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, absl::string_view what) {
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dst, src, n, kind, stream_), what));
    return Cuda(cudaStreamSynchronize(stream_), what);
  }
  // The device tensor's values as host F32.
  absl::StatusOr<std::vector<float>> Fetch(const Tensor& t) {
    RETURN_IF_ERROR(Supported(t));
    std::vector<float> v(t.numel());
    if (t.dtype == DType::kF32) {
      RETURN_IF_ERROR(Copy(v.data(), t.data, t.nbytes(), cudaMemcpyDeviceToHost, "copy to the host"));
      return v;
    }
    std::vector<uint16_t> h(t.numel());
    RETURN_IF_ERROR(Copy(h.data(), t.data, t.nbytes(), cudaMemcpyDeviceToHost, "copy to the host"));
    for (size_t i = 0; i < h.size(); ++i) v[i] = Fp16ToFloat(h[i]);
    return v;
  }
  // v back into the device tensor, in its dtype.
  absl::Status Store(const std::vector<float>& v, Tensor& t) {
    if (t.dtype == DType::kF32) return Copy(t.data, v.data(), t.nbytes(), cudaMemcpyHostToDevice, "copy to the device");
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = FloatToFp16(v[i]);
    return Copy(t.data, h.data(), t.nbytes(), cudaMemcpyHostToDevice, "copy to the device");
  }

  std::unique_ptr<Communicator> host_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<Communicator> MakeHostStagedCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream) {
  return std::make_unique<HostStagedCommunicator>(std::move(host), stream);
}

}  // namespace q38
