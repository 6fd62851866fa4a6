// Lab bench of decode attention on one GPU (kernels/testing/bench_timing.h), µs per layer in a
// CUDA graph of a decode step's 12 layers, each on its own caches:
// - attention over the selection: one token at the full-size per-rank shapes of TP1, TP2 and TP4
//   (24/12/6 query heads and 2/1/1 KV heads of 256, 512 selected blocks of 4 tokens at position
//   8,191: 2,048 attended tokens in 65 splits), the grouped decode kernel that SelectedAttention
//   launches against the query-head kernel, each with the merge, their outputs compared; and the
//   merge alone against the merge as it stood before (one dependent load per split, three passes;
//   kept here as "v0"), checked bitwise;
// - the indexer's block selection (scores, then the top 512) at contexts from 8,192 to 262,144
//   tokens: IndexerSelect's two kernels against IndexerSelectGrid's one, their ids compared;
// - prefill attention, an 8,192-token prompt at TP1 and TP4 (each query attending its 512
//   selected blocks, or every block before position 2,048, and its tail): the launched grouped
//   kernel (GroupedAttention) against the one it replaced (attention_prefill_v0.cuh),
//   outputs compared; µs a layer, useful TFLOP/s against the measured WMMA rate, and the key and
//   value bytes the blocks read (from L2: one layer's cache is 16 MB at TP1);
// - the indexer's pooling of raw keys into block keys, one token and 8,192, against the CPU.
// The exit status is 1 if a check fails.
// Usage: attention_bench
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_prefill_cuda.h"
#include "kernels/attention/attention_prefill_v0.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/testing/bench_checks.h"
#include "kernels/testing/bench_timing.h"
#include "kernels/testing/device_array.cuh"

namespace q38 {
namespace {

using bench::Bench;
using bench::DeviceArray;
using bench::FillHalfKernel;
using bench::Timing;

constexpr int64_t kHeadDim = 256, kRatio = 4, kMaxBlocks = 512, kPosition = 8191, kSlots = 8192, kLayers = 12;

// The merge before 2fc4022: every thread reads the splits' maxima and sums from global memory,
// one dependent load per split in each of three loops.
__global__ void MergeV0Kernel(const float* __restrict__ part, __half* __restrict__ o, int64_t dh, int64_t splits) {
  const float* pp = part + static_cast<int64_t>(blockIdx.x) * splits * (dh + 2);
  float M = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) M = fmaxf(M, pp[s * (dh + 2)]);
  float L = 0;
  for (int64_t s = 0; s < splits; ++s) {
    const float ms = pp[s * (dh + 2)];
    if (ms != -INFINITY) L += pp[s * (dh + 2) + 1] * __expf(ms - M);
  }
  for (int64_t c = threadIdx.x; c < dh; c += blockDim.x) {
    float a = 0;
    for (int64_t s = 0; s < splits; ++s) {
      const float ms = pp[s * (dh + 2)];
      if (ms != -INFINITY) a += pp[s * (dh + 2) + 2 + c] * __expf(ms - M);
    }
    o[static_cast<int64_t>(blockIdx.x) * dh + c] = __float2half(a / L);
  }
}

// The selected blocks: 512 distinct ids below the 2,048 complete blocks of position 8,191.
__global__ void FillSelectionKernel(int32_t* sel) {
  const int i = threadIdx.x + blockIdx.x * blockDim.x;
  if (i < kMaxBlocks) sel[i] = (i * 4 + i / 128) % 2048;
}

std::vector<uint16_t> Bits(const __half* d, int64_t n) {
  std::vector<uint16_t> h(n);
  Q38_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  return h;
}

// The largest |a − b| relative to the largest |b|, over FP16 outputs.
double LargestGap(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double gap = 0, top = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = __half2float(__ushort_as_half(a[i])), y = __half2float(__ushort_as_half(b[i]));
    gap = std::max(gap, std::abs(x - y));
    top = std::max(top, std::abs(y));
  }
  return top > 0 ? gap / top : gap;
}

int AttentionTable(Bench& b) {
  const cudaStream_t s = b.stream();
  int failures = 0;
  std::printf("\n## Decode attention, one token at position 8,191 (2,048 attended tokens)\n\n"
              "µs per layer in a CUDA graph of 12 layers; both split kernels with the merge. Largest gap: the "
              "query-head kernel's output against the launched one's, relative to its largest value.\n\n"
              "| TP | q heads | splits | query-head kernel | grouped decode kernel (launched) | query-head / grouped | "
              "largest gap | merge v0 | merge now | v0 / now | same bits |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int tp : {1, 2, 4}) {
    const cuda::SelectedAttentionDims d{24 / tp, tp == 1 ? 2 : 1, kHeadDim, kRatio, kMaxBlocks};
    const int64_t splits = cuda::AttentionSplits(1, d), scratch_floats = cuda::AttentionScratchFloats(1, d);
    const int64_t cache = kSlots * d.kv_heads * kHeadDim, width = d.q_heads * kHeadDim;
    DeviceArray<__half> q(width), k(kLayers * cache), v(kLayers * cache), o(width), o_heads(width), o_v0(width);
    DeviceArray<float> part(kLayers * scratch_floats);
    DeviceArray<int32_t> sel(kMaxBlocks);
    DeviceArray<int64_t> position(1);
    FillHalfKernel<<<16, 256, 0, s>>>(q.p, width, 1, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(k.p, kLayers * cache, 2, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(v.p, kLayers * cache, 3, 1.0f);
    FillSelectionKernel<<<2, 256, 0, s>>>(sel.p);
    Q38_CUDA_LAUNCHED();
    const int64_t pos = kPosition;
    Q38_CUDA_CHECK(cudaMemcpyAsync(position.p, &pos, sizeof pos, cudaMemcpyHostToDevice, s));
    const auto attend = [&](int i, cudaStream_t st) {
      const int layer = i % kLayers;
      cuda::SelectedAttention(q.p, k.p + layer * cache, v.p + layer * cache, sel.p, position.p, o.p,
                              part.p + layer * scratch_floats, 1, d, st);
    };
    const auto by_heads = [&](int i, cudaStream_t st) {
      const int layer = i % kLayers;
      float* pp = part.p + layer * scratch_floats;
      cuda::QueryHeadAttention(q.p, k.p + layer * cache, v.p + layer * cache, sel.p, position.p, o_heads.p, pp, 1,
                               splits, d, st);
      cuda::AttentionMerge(pp, o_heads.p, 1, d.q_heads, kHeadDim, splits, st);
    };
    by_heads(kLayers - 1, s);
    for (int i = 0; i < kLayers; ++i) attend(i, s);  // every layer's partial results, for the merges alone
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const double gap = LargestGap(Bits(o_heads.p, width), Bits(o.p, width));
    failures += gap < 2e-3 ? 0 : 1;
    const auto merge_v0 = [&](int i, cudaStream_t st) {
      MergeV0Kernel<<<d.q_heads, 128, 0, st>>>(part.p + (i % kLayers) * scratch_floats, o_v0.p, kHeadDim, splits);
    };
    const auto merge = [&](int i, cudaStream_t st) {
      cuda::AttentionMerge(part.p + (i % kLayers) * scratch_floats, o.p, 1, d.q_heads, kHeadDim, splits, st);
    };
    merge_v0(kLayers - 1, s);
    Q38_CUDA_LAUNCHED();
    merge(kLayers - 1, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const bool same = Bits(o.p, width) == Bits(o_v0.p, width);
    failures += same ? 0 : 1;
    const Timing heads = b.Graph(kLayers, by_heads), whole = b.Graph(kLayers, attend);
    const Timing tv0 = b.Graph(kLayers, merge_v0), now = b.Graph(kLayers, merge);
    std::printf("| %d | %lld | %lld | %.2f | %.2f | %.2f× | %.1e | %.2f | %.2f | %.2f× | %s |\n", tp,
                static_cast<long long>(d.q_heads), static_cast<long long>(splits), heads.median_us, whole.median_us,
                heads.median_us / whole.median_us, gap, tv0.median_us, now.median_us, tv0.median_us / now.median_us,
                same ? "yes" : "NO");
    std::fflush(stdout);
  }
  return failures;
}

// The indexer's selection for one token as the context grows: every complete block is scored
// (4 heads of 128 against the pooled keys) and the top 512 are kept, by a score kernel and a block
// for the query (cuda::IndexerSelect) and by one kernel with grid-wide barriers
// (cuda::IndexerSelectGrid); the two selections must be the same ids (returns 1 if not).
int SelectionTable(Bench& b) {
  const cudaStream_t s = b.stream();
  constexpr int64_t kIndexHeads = 4, kIndexDim = 128;
  int failures = 0;
  std::printf("\n## Indexer selection, one token\n\n"
              "µs per layer in a CUDA graph of 12 layers (scores, then the top %lld blocks): two kernels "
              "(IndexerSelect) and one (IndexerSelectGrid).\n\n"
              "| context | complete blocks | two kernels µs | one kernel µs | same ids |\n|---|---|---|---|---|\n",
              static_cast<long long>(kMaxBlocks));
  for (int64_t context : {int64_t{8192}, int64_t{32768}, int64_t{131072}, int64_t{262144}}) {
    const int64_t blocks = context / kRatio;
    DeviceArray<__half> iq(kIndexHeads * kIndexDim), pooled(kLayers * blocks * kIndexDim);
    DeviceArray<float> scratch(blocks);
    DeviceArray<int> grid_scratch(cuda::IndexerSelectGridScratchInts());
    DeviceArray<int32_t> sel(kMaxBlocks), sel_grid(kMaxBlocks);
    DeviceArray<int64_t> position(1);
    FillHalfKernel<<<16, 256, 0, s>>>(iq.p, kIndexHeads * kIndexDim, 4, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(pooled.p, kLayers * blocks * kIndexDim, 5, 1.0f);
    Q38_CUDA_LAUNCHED();
    const int64_t pos = context - 1;
    Q38_CUDA_CHECK(cudaMemcpyAsync(position.p, &pos, sizeof pos, cudaMemcpyHostToDevice, s));
    const bench::Launch two = [&](int i, cudaStream_t st) {
      cuda::IndexerSelect(iq.p, pooled.p + (i % kLayers) * blocks * kIndexDim, position.p, sel.p, scratch.p, 1,
                          kIndexHeads, kIndexDim, kRatio, kMaxBlocks, blocks, st);
    };
    const bench::Launch one = [&](int i, cudaStream_t st) {
      cuda::IndexerSelectGrid(iq.p, pooled.p + (i % kLayers) * blocks * kIndexDim, position.p, sel_grid.p,
                              grid_scratch.p, kIndexHeads, kIndexDim, kRatio, kMaxBlocks, blocks, st);
    };
    Q38_CUDA_CHECK(cudaMemsetAsync(sel.p, 0x7f, kMaxBlocks * sizeof(int32_t), s));  // unwritten slots differ
    Q38_CUDA_CHECK(cudaMemsetAsync(sel_grid.p, 0x3f, kMaxBlocks * sizeof(int32_t), s));
    two(0, s);
    one(0, s);
    std::vector<int32_t> a(kMaxBlocks), g(kMaxBlocks);
    Q38_CUDA_CHECK(cudaMemcpyAsync(a.data(), sel.p, kMaxBlocks * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    Q38_CUDA_CHECK(cudaMemcpyAsync(g.data(), sel_grid.p, kMaxBlocks * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const bool same = a == g;
    failures += same ? 0 : 1;
    const Timing t2 = b.Graph(kLayers, two), t1 = b.Graph(kLayers, one);
    std::printf("| %lld | %lld | %.2f | %.2f | %s |\n", static_cast<long long>(context), static_cast<long long>(blocks),
                t2.median_us, t1.median_us, same ? "yes" : "NO");
    std::fflush(stdout);
  }
  return failures;
}

// Query t (at position t) of a prompt: its 512 selected blocks spread evenly over its complete
// blocks in ascending order, or all of them where it has fewer; −1 after the last.
__global__ void FillPrefillSelectionKernel(int32_t* sel, int64_t T) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * kMaxBlocks) return;
  const int64_t t = i / kMaxBlocks, j = i % kMaxBlocks, complete = (t + 1) / kRatio;
  sel[i] = complete <= kMaxBlocks ? (j < complete ? static_cast<int32_t>(j) : -1)
                                  : static_cast<int32_t>(j * complete / kMaxBlocks);
}

int PrefillTable(Bench& b) {
  const cudaStream_t s = b.stream();
  constexpr int64_t kT = 8192;
  const double wmma = b.WmmaTflops();
  int failures = 0;
  // Attended tokens over the prompt: the selected blocks' tokens and the tail of the query's own block.
  double attended = 0;
  for (int64_t t = 0; t < kT; ++t) attended += std::min((t + 1) / kRatio, kMaxBlocks) * kRatio + (t + 1) % kRatio;
  std::printf("\n## Prefill attention, an 8,192-token prompt\n\n"
              "µs a layer (eager, the median of batches of 2); useful TFLOP/s (Q·Kᵀ and P·V of the real query "
              "heads) and its share of the WMMA rate (%.0f TFLOP/s measured); GB/s of key and value rows read by "
              "the blocks. Largest gap: v0's output against the launched kernel's, relative to its largest "
              "value.\n\n"
              "| TP | q heads | KV heads | v0 µs | launched µs | v0 / launched | TFLOP/s | share of WMMA | K/V GB/s | "
              "largest gap |\n|---|---|---|---|---|---|---|---|---|---|\n",
              wmma);
  for (int tp : {1, 4}) {
    const cuda::SelectedAttentionDims d{24 / tp, tp == 1 ? 2 : 1, kHeadDim, kRatio, kMaxBlocks};
    const int64_t width = kT * d.q_heads * kHeadDim, cache = kT * d.kv_heads * kHeadDim;
    DeviceArray<__half> q(width), k(cache), v(cache), o(width), o_v0(width);
    DeviceArray<int32_t> sel(kT * kMaxBlocks);
    DeviceArray<int64_t> positions(kT);
    FillHalfKernel<<<1024, 256, 0, s>>>(q.p, width, 6, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(k.p, cache, 7, 1.0f);
    FillHalfKernel<<<1024, 256, 0, s>>>(v.p, cache, 8, 1.0f);
    FillPrefillSelectionKernel<<<static_cast<unsigned>(kT * kMaxBlocks / 256), 256, 0, s>>>(sel.p, kT);
    Q38_CUDA_LAUNCHED();
    std::vector<int64_t> pos(kT);
    for (int64_t t = 0; t < kT; ++t) pos[t] = t;
    Q38_CUDA_CHECK(cudaMemcpyAsync(positions.p, pos.data(), kT * sizeof(int64_t), cudaMemcpyHostToDevice, s));
    const bench::Launch launched = [&](int, cudaStream_t st) {
      cuda::GroupedAttention(q.p, k.p, v.p, sel.p, positions.p, o.p, kT, d, st);
    };
    const bench::Launch v0 = [&](int, cudaStream_t st) {
      cuda::prefill_v0::PrefillAttentionV0(q.p, k.p, v.p, sel.p, positions.p, o_v0.p, kT, d, st);
      Q38_CUDA_LAUNCHED();
    };
    launched(0, s);
    v0(0, s);
    Q38_CUDA_CHECK(cudaStreamSynchronize(s));
    const double gap = LargestGap(Bits(o_v0.p, width), Bits(o.p, width));
    failures += gap < 2e-3 ? 0 : 1;
    const Timing told = b.Eager(2, v0, 3, 1), tnew = b.Eager(2, launched, 3, 1);
    const double flops = attended * d.q_heads * kHeadDim * 4, bytes = attended * d.kv_heads * kHeadDim * 2 * 2;
    std::printf("| %d | %lld | %lld | %.0f | %.0f | %.2f× | %.1f | %.1f%% | %.0f | %.1e%s |\n", tp,
                static_cast<long long>(d.q_heads), static_cast<long long>(d.kv_heads), told.median_us, tnew.median_us,
                told.median_us / tnew.median_us, flops / (tnew.median_us * 1e6),
                100 * flops / (tnew.median_us * 1e6) / wmma, bytes / (tnew.median_us * 1e3), gap,
                gap < 2e-3 ? "" : " MISMATCH");
    std::fflush(stdout);
  }
  return failures;
}

// The indexer's pooling of the raw keys into block keys (IndexerPoolBlocks: mean of 4 keys,
// zero-centred RMSNorm, RoPE on 64 of 128 dims, θ = 10⁷): one decode token that completes a block,
// and an 8,192-token prefill chunk (2,048 blocks). Every pooled row against cpu::IndexerPoolBlocks
// on the same FP16 inputs, within 2e-3 of the largest value (the GPU rounds its output to FP16).
int PoolTable(Bench& b) {
  const cudaStream_t s = b.stream();
  constexpr int64_t kIndexDim = 128, kRotary = 64, kT = 8192, kBlocks = kT / kRatio;
  constexpr double kTheta = 1e7;
  constexpr float kEps = 1e-6f;
  DeviceArray<__half> raw(kT * kIndexDim), knorm(kIndexDim), pooled(kBlocks * kIndexDim);
  DeviceArray<int64_t> positions(kT);
  FillHalfKernel<<<256, 256, 0, s>>>(raw.p, kT * kIndexDim, 6, 2.0f);
  FillHalfKernel<<<1, 128, 0, s>>>(knorm.p, kIndexDim, 7, 0.4f);
  Q38_CUDA_LAUNCHED();
  std::vector<int64_t> pos(kT);
  for (int64_t t = 0; t < kT; ++t) pos[t] = t;
  Q38_CUDA_CHECK(cudaMemcpyAsync(positions.p, pos.data(), kT * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  cuda::IndexerPoolBlocks(raw.p, knorm.p, pooled.p, positions.p, kT, kIndexDim, kRatio, kEps, kRotary, kTheta, s);
  Q38_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> hraw = bench::ToHost(raw.p, kT * kIndexDim), hw = bench::ToHost(knorm.p, kIndexDim),
                           got = bench::ToHost(pooled.p, kBlocks * kIndexDim);
  std::vector<float> want(kBlocks * kIndexDim);
  cpu::IndexerPoolBlocks(hraw.data(), hw.data(), want.data(), 0, kBlocks, kIndexDim, kRatio, kEps, kRotary, kTheta);
  const double gap = bench::RelativeGap(got, want);
  const bool near = gap <= 2e-3;
  std::printf("\n## Indexer pooling\n\nµs per call in a CUDA graph (40 calls at one token, 5 at 8,192); the "
              "largest gap from the CPU, relative to the largest value: %.1e%s.\n\n| tokens | µs |\n|---|---|\n",
              gap, near ? "" : " TOO FAR");
  // One token at the last position of a block, rotating over the chunk's block ends.
  const Timing one = b.Graph(40, [&](int i, cudaStream_t st) {
    const int64_t t = (i % kBlocks) * kRatio + kRatio - 1;
    cuda::IndexerPoolBlocks(raw.p, knorm.p, pooled.p, positions.p + t, 1, kIndexDim, kRatio, kEps, kRotary, kTheta, st);
  });
  const Timing all = b.Graph(5, [&](int, cudaStream_t st) {
    cuda::IndexerPoolBlocks(raw.p, knorm.p, pooled.p, positions.p, kT, kIndexDim, kRatio, kEps, kRotary, kTheta, st);
  });
  std::printf("| 1 | %.2f |\n| %lld | %.2f |\n", one.median_us, static_cast<long long>(kT), all.median_us);
  return near ? 0 : 1;
}

int Run(Bench& b) { return AttentionTable(b) + SelectionTable(b) + PrefillTable(b) + PoolTable(b); }

}  // namespace
}  // namespace q38

int main() {
  return q38::bench::BenchMain("attention_bench", "both split kernels agree; merge of now = v0; both selections agree; both prefill kernels agree", q38::Run);
}
