#include "worker/checkpoint/tensor_view.h"

namespace q38 {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace q38
