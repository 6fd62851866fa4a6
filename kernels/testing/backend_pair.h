// Runs one op on the CPU backend (the FP32 reference) and on the CUDA backend from the same
// inputs, for the kernels' unit tests (kernels/*/*_cuda_test.cc). Inputs are rounded to FP16
// first, so that both backends see identical values and a difference is the kernel's own error.
// Outputs are poisoned with NaN before every run: an element the kernel does not write fails.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "glog/logging.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/testing/op_test_util.h"

namespace q38::cuda_test {

inline bool HasGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define Q38_REQUIRE_GPU() \
  if (!::q38::cuda_test::HasGpu()) GTEST_SKIP() << "no CUDA device visible"

// FP16 keeps 11 significant bits: rounding one value costs a relative error of up to 2⁻¹¹, an
// NMSE near 1e-7. A kernel whose only loss is its FP16 output (and FP32 accumulation) stays
// within 1e-6; ops that round intermediates too get a multiple of it.
constexpr double kFp16Nmse = 1e-6;

inline std::vector<float> RoundFp16(std::vector<float> v) {
  for (float& x : v) x = Fp16ToFloat(FloatToFp16(x));
  return v;
}

// One tensor on both backends.
struct Twin {
  Buffer cpu, gpu;
};

class BackendPair {
 public:
  BackendPair() : cpu_(MakeCpuBackend()) {
    auto gpu = CudaBackend::Create(0);
    CHECK(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }
  Backend& cpu() { return *cpu_; }
  CudaBackend& gpu() { return *gpu_; }

  // Activations and weights: FP32 on the CPU, FP16 on the GPU, the same values.
  Twin Act(const std::vector<float>& host, std::vector<int64_t> shape) {
    const std::vector<float> r = RoundFp16(host);
    return {cpu_->Upload(r, shape), gpu_->Upload(r, shape)};
  }
  Twin F32(const std::vector<float>& host, std::vector<int64_t> shape) {
    return {cpu_->UploadF32(host, shape), gpu_->UploadF32(host, shape)};
  }
  Twin Raw(const void* host, DType dtype, std::vector<int64_t> shape) {
    return {cpu_->UploadRaw(host, dtype, shape), gpu_->UploadRaw(host, dtype, shape)};
  }
  // An output: activation dtype (or `dtype`) on each side, NaN-filled (integers: −7).
  Twin Out(std::vector<int64_t> shape, DType dtype = DType::kF16) {
    Twin t{cpu_->Alloc(dtype == DType::kF16 ? DType::kF32 : dtype, shape), gpu_->Alloc(dtype, shape)};
    Poison(t);
    return t;
  }
  void Poison(Twin& t) {
    if (t.gpu.t().dtype == DType::kI32) {
      std::vector<int32_t> bad(t.gpu.t().numel(), -7);
      gpu_->CopyFromHost(bad.data(), t.gpu.t());
      cpu_->CopyFromHost(bad.data(), t.cpu.t());
      return;
    }
    cpu_->Fill(t.cpu.t(), NAN);
    gpu_->Fill(t.gpu.t(), NAN);
  }

  // Host FP32 copies of a float tensor on each side.
  std::vector<float> CpuFloats(const Twin& t) { return Floats(*cpu_, t.cpu.t()); }
  std::vector<float> GpuFloats(const Twin& t) {
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return Floats(*gpu_, t.gpu.t());
  }
  std::vector<int32_t> CpuInts(const Twin& t) { return Ints(*cpu_, t.cpu.t()); }
  std::vector<int32_t> GpuInts(const Twin& t) { return Ints(*gpu_, t.gpu.t()); }

  // The GPU result fully written and within `k` times kFp16Nmse of the CPU result in normalized
  // mean squared error, Σ(got − want)² / Σ want² (llama.cpp's test-backend-ops measure).
  ::testing::AssertionResult Matches(const Twin& out, double k = 1) {
    const std::vector<float> got = GpuFloats(out), want = CpuFloats(out);
    ::testing::AssertionResult written = cpu::op_test::NoNan(got);
    if (!written) return written;
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      ref += static_cast<double>(want[i]) * want[i];
    }
    const double nmse = ref > 0 ? err / ref : err;
    if (nmse <= k * kFp16Nmse) return ::testing::AssertionSuccess() << "nmse " << nmse;
    size_t worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(got[i] - want[i]) > std::fabs(got[worst] - want[worst])) worst = i;
    }
    return ::testing::AssertionFailure() << "nmse " << nmse << " > " << k * kFp16Nmse << "; worst at " << worst
                                         << ": got " << got[worst] << ", want " << want[worst];
  }

 private:
  static std::vector<float> Floats(Backend& b, const Tensor& t) {
    std::vector<float> v(t.numel());
    b.CopyToHost(t, v.data());
    return v;
  }
  static std::vector<int32_t> Ints(Backend& b, const Tensor& t) {
    std::vector<int32_t> v(t.numel());
    b.CopyToHost(t, v.data());
    return v;
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<CudaBackend> gpu_;
};

}  // namespace q38::cuda_test
