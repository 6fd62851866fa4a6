// The indexer's block scores and top-k selection for one query as one kernel with grid-wide
// barriers (attention_cuda.h, IndexerSelectGrid). The selection of SelectKernel ran in a single
// block, whose walk over 65,536 scores at 262,144 context took ~100 µs; here every block scores
// and keeps its own contiguous run of block ids (its keys stay in shared memory), each radix pass
// adds the blocks' histograms into one in global memory with integer atomics (the counts do not
// depend on their order) and meets at a barrier, after which every block finds the same digit.
// A last barrier exchanges the blocks' counts of keys above and at the cut, so that each block
// writes its ids at the right place. The selected set and its order are SelectKernel's: every key
// above the max_blocks-th largest and the lowest ids of those equal to it, in ascending id order.
#include <cooperative_groups.h>

#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/indexer_select.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grid_launch.h"

namespace q38::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / kWarp;
constexpr int kPasses = 4, kBins = 256;
static_assert(kThreads == kBins, "a thread a bin");
constexpr int kScoreIds = 4;  // block ids a warp scores at once, their loads issued together

struct Args {
  const __half* iq;          // [heads, di]: the query's indexer heads
  const __half* pooled;      // [max_visible, di]
  const int64_t* position;   // the query's position
  int32_t* sel;              // [max_blocks]
  int* hist;                 // [kPasses, kBins], zero on entry
  int* counts;               // [gridDim.x, 2]: keys above and at the cut
  int heads, di, ratio, max_blocks, max_visible;
};

__global__ void __launch_bounds__(kThreads, 2) IndexerSelectGridKernel(Args p) {
  extern __shared__ float qs[];  // [heads·di], then the block's keys
  __shared__ int bins[kBins];
  __shared__ uint32_t prefix_sh;
  __shared__ int need_sh, warp_above[kWarps], warp_equal[kWarps];
  const int nb = static_cast<int>((p.position[0] + 1) / p.ratio);
  if (nb > p.max_visible) __trap();  // past the pooled keys (and the keys' shared memory)
  if (nb <= p.max_blocks) {  // every visible block fits: the same in every block, so no barrier waits
    if (blockIdx.x == 0) {
      for (int i = threadIdx.x; i < p.max_blocks; i += kThreads) p.sel[i] = i < nb ? i : -1;
    }
    return;
  }
  uint32_t* keys = reinterpret_cast<uint32_t*>(qs + p.heads * p.di);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, G = gridDim.x, b = blockIdx.x;
  const int span = (nb + G - 1) / G, lo = min(nb, b * span), n = min(nb, lo + span) - lo;
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();

  // Scores of this block's ids, kScoreIds a warp at once, as ScoreKernel sums them; kept as order keys.
  for (int i = threadIdx.x; i < p.heads * p.di; i += kThreads) qs[i] = __half2float(p.iq[i]);
  __syncthreads();
  for (int i0 = warp * kScoreIds; i0 < n; i0 += kWarps * kScoreIds) {
    float s[kScoreIds];
    indexer::BlockScores<kScoreIds>(qs, p.pooled, lo + i0, lo + n, p.heads, p.di, lane, s);
#pragma unroll
    for (int i = 0; i < kScoreIds; ++i) {
      if (lane == 0 && i0 + i < n) keys[i0 + i] = indexer::OrderKey(s[i]);
    }
  }
  __syncthreads();

  // Four radix passes of 8 bits from the top: the block's histogram of the keys that still match,
  // added into the pass's global one; behind the barrier every block reads it whole.
  uint32_t prefix = 0, mask = 0;
  int need = p.max_blocks;
  for (int pass = 0, shift = 24; pass < kPasses; ++pass, shift -= 8) {
    bins[threadIdx.x] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      if ((keys[i] & mask) == prefix) atomicAdd(&bins[(keys[i] >> shift) & 255u], 1);
    }
    __syncthreads();
    if (bins[threadIdx.x] != 0) atomicAdd(&p.hist[pass * kBins + threadIdx.x], bins[threadIdx.x]);
    grid.sync();
    bins[threadIdx.x] = __ldcg(&p.hist[pass * kBins + threadIdx.x]);
    __syncthreads();
    if (warp == 0) indexer::FindDigit(bins, lane, shift, prefix, need, &prefix_sh, &need_sh);
    __syncthreads();
    prefix = prefix_sh;
    need = need_sh;
    mask |= 255u << shift;
  }

  // prefix is the max_blocks-th largest key: every key above it is taken, and the `need` lowest ids
  // equal to it. Warp w owns the block's ids [w·sub, (w+1)·sub).
  const int sub = (n + kWarps * kWarp - 1) / (kWarps * kWarp) * kWarp, wlo = min(n, warp * sub), whi = min(n, wlo + sub);
  int above = 0, equal = 0;
  for (int i0 = wlo; i0 < whi; i0 += kWarp) {
    const int i = i0 + lane;
    const uint32_t key = i < whi ? keys[i] : 0;
    above += __popc(__ballot_sync(0xffffffffu, i < whi && key > prefix));
    equal += __popc(__ballot_sync(0xffffffffu, i < whi && key == prefix));
  }
  if (lane == 0) {
    warp_above[warp] = above;
    warp_equal[warp] = equal;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int a = 0, e = 0;
    for (int w = 0; w < kWarps; ++w) a += warp_above[w], e += warp_equal[w];
    p.counts[2 * b] = a;
    p.counts[2 * b + 1] = e;
  }
  grid.sync();
  // This block's place: the keys above the cut in the blocks before it, and as many of their
  // equal keys as the cut takes (the equal keys go in id order, so min(need, those before)).
  int a = 0, e = 0;
  for (int c = threadIdx.x; c < b; c += kThreads) {
    a += __ldcg(&p.counts[2 * c]);
    e += __ldcg(&p.counts[2 * c + 1]);
  }
  a = static_cast<int>(BlockSum(static_cast<float>(a)));  // counts below 2²⁴ are exact in FP32
  e = static_cast<int>(BlockSum(static_cast<float>(e)));
  int equal_before = e, slot = a + min(need, e);
  for (int w = 0; w < warp; ++w) {
    slot += warp_above[w] + min(max(need - equal_before, 0), warp_equal[w]);
    equal_before += warp_equal[w];
  }
  const uint32_t below = (1u << lane) - 1;
  for (int i0 = wlo; i0 < whi; i0 += kWarp) {
    const int i = i0 + lane;
    const uint32_t key = i < whi ? keys[i] : 0;
    const uint32_t equals = __ballot_sync(0xffffffffu, i < whi && key == prefix);
    const bool take = i < whi && (key > prefix || (key == prefix && equal_before + __popc(equals & below) < need));
    const uint32_t taken = __ballot_sync(0xffffffffu, take);
    if (take) p.sel[slot + __popc(taken & below)] = lo + i;
    slot += __popc(taken);
    equal_before += __popc(equals);
  }
}

// Dynamic shared memory: the query's heads, then the keys of the most ids a block can take (one
// block an SM at the least).
size_t SharedBytes(int64_t heads, int64_t di, int64_t max_visible, int sms) {
  return (heads * di + CeilDiv(max_visible, sms)) * sizeof(float);
}

int Sms() {
  int device = 0, sms = 0;
  Q38_CUDA_CHECK(cudaGetDevice(&device));
  Q38_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Blocks for a shape: all that are resident at once, at least one an SM; 0 where that cannot be.
int Blocks(int64_t heads, int64_t di, int64_t max_visible) {
  const int sms = Sms();
  const size_t smem = SharedBytes(heads, di, max_visible, sms);
  static const size_t limit = DynamicSharedLimit(IndexerSelectGridKernel);  // a property of the kernel
  if (smem > limit) return 0;
  const int blocks = CoResidentBlocks(IndexerSelectGridKernel, kThreads, smem);
  return blocks >= sms ? blocks : 0;
}

}  // namespace

int64_t IndexerSelectGridScratchInts() { return int64_t{kPasses} * kBins + 2 * int64_t{kGridBlocksPerSm} * Sms(); }

bool IndexerSelectGridFits(int64_t heads, int64_t di, int64_t max_visible_blocks) {
  return heads >= 1 && heads <= indexer::kMaxIndexHeads && di >= 1 && di <= indexer::kMaxDi &&
         Blocks(heads, di, max_visible_blocks) > 0;
}

void IndexerSelectGrid(const __half* iq, const __half* pooled, const int64_t* positions, int32_t* sel, int* scratch,
                       int64_t heads, int64_t di, int64_t ratio, int64_t max_blocks, int64_t max_visible_blocks,
                       cudaStream_t stream) {
  CHECK_GT(max_blocks, 0) << "IndexerSelectGrid: a budget of no blocks";
  CHECK(heads >= 1 && heads <= indexer::kMaxIndexHeads && di >= 1 && di <= indexer::kMaxDi)
      << "IndexerSelectGrid: heads " << heads << " di " << di;
  const int blocks = Blocks(heads, di, max_visible_blocks);
  CHECK_GT(blocks, 0) << "IndexerSelectGrid: " << max_visible_blocks << " visible blocks do not fit";
  Q38_CUDA_CHECK(cudaMemsetAsync(scratch, 0, kPasses * kBins * sizeof(int), stream));
  const Args args{iq,
                  pooled,
                  positions,
                  sel,
                  scratch,
                  scratch + kPasses * kBins,
                  static_cast<int>(heads),
                  static_cast<int>(di),
                  static_cast<int>(ratio),
                  static_cast<int>(max_blocks),
                  static_cast<int>(max_visible_blocks)};
  LaunchCooperative(IndexerSelectGridKernel, blocks, kThreads, SharedBytes(heads, di, max_visible_blocks, Sms()),
                    stream, args);
}

}  // namespace q38::cuda
