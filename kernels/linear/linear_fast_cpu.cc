// The fast path of y = x·Wᵀ: FP32 accumulation in 16 lanes, four weight rows against one input
// row at a time so each load of x serves four rows, and each block of four rows serving every
// token before the next block (it stays in L1 for prefill).
#include <algorithm>

#include "kernels/cpu_simd.h"
#include "kernels/linear/linear.h"

namespace q38::cpu {
namespace {

constexpr int64_t kRows = 4;

// y[0..kRowsHere) = the dot products of x with rows w[0..kRowsHere) (stride K). The accumulators
// are named variables, not an array, so that they stay in registers; always inlined, since a
// helper compiled on its own would get the baseline instruction set in every clone.
template <int kRowsHere>
__attribute__((always_inline)) inline void DotRows(const float* x, const float* w, int64_t K, float* y) {
  Lanes a0, a1, a2, a3;
  const int64_t body = K / kLanes * kLanes;
  for (int64_t k = 0; k < body; k += kLanes) {
    const Vec8 x_lo = Load8(x + k), x_hi = Load8(x + k + 8);
    MulAdd(a0, x_lo, x_hi, w + k);
    if constexpr (kRowsHere > 1) MulAdd(a1, x_lo, x_hi, w + K + k);
    if constexpr (kRowsHere > 2) MulAdd(a2, x_lo, x_hi, w + 2 * K + k);
    if constexpr (kRowsHere > 3) MulAdd(a3, x_lo, x_hi, w + 3 * K + k);
  }
  const Lanes acc[4] = {a0, a1, a2, a3};
  for (int r = 0; r < kRowsHere; ++r) {
    float s = SumLanes(acc[r]);
    for (int64_t k = body; k < K; ++k) s += x[k] * w[r * K + k];
    y[r] = s;
  }
}

}  // namespace

Q38_SIMD_CLONES
void LinearFast(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N, int64_t y_stride) {
  for (int64_t n = 0; n < N; n += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, N - n);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      float* yt = y + t * y_stride + n;
      switch (rows) {
        case 4: DotRows<4>(xt, w + n * K, K, yt); break;
        case 3: DotRows<3>(xt, w + n * K, K, yt); break;
        case 2: DotRows<2>(xt, w + n * K, K, yt); break;
        default: DotRows<1>(xt, w + n * K, K, yt);
      }
    }
  }
}

}  // namespace q38::cpu
