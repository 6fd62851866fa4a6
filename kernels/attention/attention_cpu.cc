#include "kernels/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"

namespace q38::cpu {

void IndexerPoolBlocks(const float* raw, const float* knorm_w, float* pooled, int64_t first,
                       int64_t count, int64_t di, int64_t ratio, float eps, int64_t rotary_dim,
                       double theta) {
  std::vector<float> mean(di);
  for (int64_t b = first; b < first + count; ++b) {
    for (int64_t c = 0; c < di; ++c) {
      double s = 0;
      for (int64_t r = 0; r < ratio; ++r) s += raw[(b * ratio + r) * di + c];
      mean[c] = static_cast<float>(s / ratio);
    }
    float* out = pooled + b * di;
    RmsNorm(mean.data(), knorm_w, out, 1, di, di, di, eps, /*zero_centred=*/true);
    const int64_t start = b * ratio;
    Rope(out, &start, 1, 1, di, rotary_dim, theta);
  }
}

void IndexerSelect(const float* iq, const float* pooled, const int64_t* positions, int32_t* sel,
                   int64_t T, int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks) {
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(di));
  std::vector<float> score;
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t nb = (positions[t] + 1) / ratio;
    int32_t* out = sel + t * max_blocks;
    std::fill(out, out + max_blocks, -1);
    ids.resize(nb);
    std::iota(ids.begin(), ids.end(), 0);
    if (nb > max_blocks) {
      score.assign(nb, 0.0f);
      for (int64_t b = 0; b < nb; ++b) {
        float s = 0;
        for (int64_t h = 0; h < heads; ++h) {
          float dot = 0;
          for (int64_t c = 0; c < di; ++c) dot += iq[(t * heads + h) * di + c] * pooled[b * di + c];
          s += std::max(dot, 0.0f);
        }
        score[b] = s * inv_sqrt;
      }
      std::partial_sort(ids.begin(), ids.begin() + max_blocks, ids.end(), [&](int32_t a, int32_t b) {
        return score[a] != score[b] ? score[a] > score[b] : a < b;
      });
      ids.resize(max_blocks);
      std::sort(ids.begin(), ids.end());
    }
    std::copy(ids.begin(), ids.end(), out);
  }
}

void SelectedAttention(const float* q, const float* kcache, const float* vcache,
                       const int32_t* sel, const int64_t* positions, float* o, int64_t T,
                       const AttentionDims& d) {
  const int64_t dh = d.head_dim, group = d.q_heads / d.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<int64_t> tokens;
  std::vector<float> score;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = positions[t];
    tokens.clear();
    for (int64_t i = 0; i < d.max_blocks && sel[t * d.max_blocks + i] >= 0; ++i) {
      for (int64_t r = 0; r < d.ratio; ++r) tokens.push_back(sel[t * d.max_blocks + i] * d.ratio + r);
    }
    for (int64_t j = (p + 1) / d.ratio * d.ratio; j <= p; ++j) tokens.push_back(j);
    score.resize(tokens.size());
    for (int64_t h = 0; h < d.q_heads; ++h) {
      const float* qh = q + (t * d.q_heads + h) * dh;
      const int64_t kvh = h / group;
      float mx = -INFINITY;
      for (size_t i = 0; i < tokens.size(); ++i) {
        const float* kh = kcache + (tokens[i] * d.kv_heads + kvh) * dh;
        float dot = 0;
        for (int64_t c = 0; c < dh; ++c) dot += qh[c] * kh[c];
        score[i] = dot * scale;
        mx = std::max(mx, score[i]);
      }
      double denom = 0;
      for (float& s : score) denom += s = std::exp(s - mx);
      float* oh = o + (t * d.q_heads + h) * dh;
      std::fill(oh, oh + dh, 0.0f);
      for (size_t i = 0; i < tokens.size(); ++i) {
        const float* vh = vcache + (tokens[i] * d.kv_heads + kvh) * dh;
        const float w = static_cast<float>(score[i] / denom);
        for (int64_t c = 0; c < dh; ++c) oh[c] += w * vh[c];
      }
    }
  }
}

}  // namespace q38::cpu
