// A tensor as it lies inside a memory-mapped checkpoint file: name, type, shape and a pointer to
// its bytes. Views do not own memory; they stay valid while the file or store that made them lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace q38 {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  // Points into the mapping. Safetensors does not align tensors, so `data` may be unaligned for
  // its dtype: copy out (memcpy) rather than casting to a wider pointer.
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the file it lives in, for error messages

  // Product of the shape (1 for a scalar). Views made by SafetensorsFile never overflow.
  int64_t numel() const;
};

}  // namespace q38
