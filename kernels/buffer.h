// Backend memory: a tensor view over an allocation it keeps alive (kernels/backend.h allocates it).
#pragma once

#include <memory>
#include <utility>

#include "kernels/tensor.h"

namespace q38 {

// Backend memory with its view. Copies share the allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tensor view, std::shared_ptr<void> storage) : view_(std::move(view)), storage_(std::move(storage)) {}
  const Tensor& t() const { return view_; }
  Tensor& t() { return view_; }
  explicit operator bool() const { return view_.data != nullptr || view_.numel() == 0; }
  // Another view into this buffer's memory (a part of it), which keeps the memory alive too.
  Buffer View(Tensor view) const { return Buffer(std::move(view), storage_); }

 private:
  Tensor view_;
  std::shared_ptr<void> storage_;
};

}  // namespace q38
