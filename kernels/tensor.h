// A tensor view: pointer, element type and shape, on whichever device owns the memory. Views
// never own; a Buffer (backend.h) or a mapped checkpoint file does.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/dtype.h"

namespace q38 {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
  // dim(-1) is the last dimension.
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  // Elements in one row of the leading dimension.
  int64_t row_size() const { return shape.empty() ? 1 : numel() / shape[0]; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, begin + count) of the leading dimension, as a view.
  Tensor Rows(int64_t begin, int64_t count) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * row_size() * DTypeSize(dtype);
    t.shape[0] = count;
    return t;
  }
  Tensor Reshaped(std::initializer_list<int64_t> s) const {
    Tensor t = *this;
    t.shape.assign(s);
    return t;
  }
};

}  // namespace q38
