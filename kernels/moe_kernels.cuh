// The mixture-of-experts kernels' bodies (kernels/moe.cu launches them), in a header of their
// own so that they compile twice: for the device, and on the host in tests/cuda_emulation/ (see
// attention_tc_kernel.cuh), where every CI machine runs them.
#ifndef LLMRT_KERNELS_MOE_KERNELS_CUH_
#define LLMRT_KERNELS_MOE_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::moe {

constexpr int kRouteWarps = 4;        // tokens per block of the routing kernel
constexpr int kPermuteThreads = 1024;
constexpr int kPermuteSharedExperts = 4096;  // experts whose cursors the permutation keeps in shared memory
constexpr int64_t kMaxGroups = 64;    // the host refuses more expert groups
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxCombineSlots = 64;  // slots per token the combination orders (the host refuses more)

// The routing order: a higher choice first, ties to the lower expert (or group).
__device__ __forceinline__ bool RanksBefore(float v1, int32_t i1, float v2, int32_t i2) {
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// A NaN choice or group score ranks as -infinity (it never outranks a number), as on the CPU.
__device__ __forceinline__ float RankValue(float v) { return isnan(v) ? -INFINITY : v; }

// One warp per token; lane l owns experts l, l + 32, ... of the token's row of choices in
// `scratch` (and, with groups, groups l, l + 32, ...). Top-k as k rounds of a warp arg-max over
// the experts not yet taken (a taken expert's choice becomes NaN, which no choice is after
// RankValue), so slot k holds the k-th best, as the CPU's partial sort gives.
__global__ void __launch_bounds__(32 * kRouteWarps) RouteKernel(RouteArgs a) {
  __shared__ float group_scores[kRouteWarps][kMaxGroups];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t t = blockIdx.x * static_cast<int64_t>(kRouteWarps) + warp;
  if (t >= a.T) return;  // a whole warp (only __syncwarp below)
  const int64_t E = a.E, per_group = E / a.n_group;
  const float* logits = a.logits + t * E;
  float* choice = a.scratch + t * E;
  // s is recomputed where needed (sigmoid of the logit, the same float expression each time).
  auto sig = [&](int64_t e) { return 1.0f / (1.0f + expf(-logits[e])); };
  for (int64_t e = lane; e < E; e += 32) {
    const float b = a.bias != nullptr ? LoadElem(a.bias, a.bias_type, e) : 0.0f;
    choice[e] = RankValue(sig(e) + b);  // the bias only selects; weights come from s
  }
  __syncwarp();
  if (a.n_group > 1) {
    // Group score: the sum of the group's two best choices; the topk_group best groups stay
    // (ties to the lower group, as a stable sort by score). Ranks first, masks after: masking
    // changes the choices the scores are computed from.
    float* gs = group_scores[warp];
    for (int64_t g = lane; g < a.n_group; g += 32) {
      const float* c = choice + g * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int64_t j = 0; j < per_group; ++j) {
        if (c[j] > best) {
          second = best;
          best = c[j];
        } else if (c[j] > second) {
          second = c[j];
        }
      }
      gs[g] = RankValue(per_group >= 2 ? best + second : best);
    }
    __syncwarp();
    for (int64_t g = lane; g < a.n_group; g += 32) {
      int64_t rank = 0;
      for (int64_t o = 0; o < a.n_group; ++o) {
        rank += RanksBefore(gs[o], static_cast<int32_t>(o), gs[g], static_cast<int32_t>(g)) ? 1 : 0;
      }
      if (rank >= a.topk_group) {
        for (int64_t j = 0; j < per_group; ++j) choice[g * per_group + j] = -INFINITY;
      }
    }
    __syncwarp();
  }
  int32_t* oi = a.idx + t * a.idx_ld;
  for (int64_t k = 0; k < a.K; ++k) {
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;  // loses to every expert, -infinity ones included
    for (int64_t e = lane; e < E; e += 32) {
      const float c = choice[e];
      if (!isnan(c) && RanksBefore(c, static_cast<int32_t>(e), bv, bi)) {
        bv = c;
        bi = static_cast<int32_t>(e);
      }
    }
    // A strict order on (choice, expert): the butterfly leaves every lane the warp's best.
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, bv, o);
      const int32_t oe = __shfl_xor_sync(kFullMask, bi, o);
      if (RanksBefore(ov, oe, bv, bi)) {
        bv = ov;
        bi = oe;
      }
    }
    if (lane == 0) oi[k] = bi;               // K <= E: an expert is always left
    if (bi % 32 == lane) choice[bi] = NAN;   // taken (its owner lane alone reads it)
    __syncwarp();
  }
  if (lane == 0) {
    float* ow = a.weights + t * a.weights_ld;
    float sum = 0.0f;
    for (int64_t k = 0; k < a.K; ++k) {
      ow[k] = sig(oi[k]);
      sum += ow[k];
    }
    for (int64_t k = 0; k < a.K; ++k) {
      if (a.norm_topk_prob) ow[k] /= (sum + 1e-20f);
      ow[k] *= a.routed_scaling_factor;
    }
  }
}

// One block. Every thread counts pairs (atomic adds on the global counts: the counts do not
// depend on the order); each thread lays out the offsets and tiles of a run of consecutive
// experts, its first row and tile the block's exclusive sums of the runs' rows and tiles (one
// thread walking all the experts was a chain of global loads: by count about 100 us for 384
// experts, at every MoE layer of a decode step); then one warp places the pairs in (token, slot)
// order, 32 at a time: the lanes naming one expert take consecutive rows in lane order
// (__match_any_sync) after those of earlier pairs (a cursor per expert).
__global__ void __launch_bounds__(kPermuteThreads) PermuteKernel(PermuteArgs a, int32_t* err) {
  const int64_t P = a.T * a.K;
  int32_t* counts = a.counts;
  // Each expert's next row: in shared memory where the experts fit (the placing warp's chain of
  // reads and writes then waits on shared memory, not on global memory's latency).
  __shared__ int32_t shared_cursor[kPermuteSharedExperts];
  int32_t* cursor = a.E <= kPermuteSharedExperts ? shared_cursor : a.counts + a.E;
  // The expert of pair i = t * K + k (invalid ids as -1).
  // (32-bit division: the host keeps P below 2^31.)
  auto expert_of = [&](int64_t i) -> int32_t {
    const int64_t t = static_cast<uint32_t>(i) / static_cast<uint32_t>(a.K);
    const int32_t e = a.idx[t * a.idx_ld + (i - t * a.K)];
    return e >= 0 && e < a.E ? e : -1;
  };
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
    const int32_t e = expert_of(i);
    a.perm_pos[i] = -1;
    if (e < 0) {
      RaiseError(err, kErrExpert);
    } else {
      atomicAdd(counts + e, 1);
    }
  }
  __syncthreads();
  {
    __shared__ int32_t sums[64];
    const int64_t per = (a.E + blockDim.x - 1) / blockDim.x;
    const int64_t e0 = threadIdx.x * per, e1 = e0 + per < a.E ? e0 + per : a.E;
    const int32_t step = static_cast<int32_t>(a.tile_rows);
    int32_t off = 0, tiles = 0;
    for (int64_t e = e0; e < e1; ++e) {
      const int32_t n = counts[e];
      off += n;
      tiles += (n + step - 1) / step;
    }
    int32_t all_rows, all_tiles;
    BlockExclusiveSum2(off, tiles, sums, &all_rows, &all_tiles);
    for (int64_t e = e0; e < e1; ++e) {
      const int32_t n = counts[e];
      cursor[e] = off;
      for (int32_t r = 0; r < n; r += step) {
        if (tiles < a.max_tiles) {
          a.tile_expert[tiles] = static_cast<int32_t>(e);
          a.tile_row0[tiles] = off + r;
          a.tile_row1[tiles] = off + min(r + step, n);
        }
        ++tiles;
      }
      off += n;
    }
    if (threadIdx.x == 0) a.tile_count[0] = all_tiles < a.max_tiles ? all_tiles : static_cast<int32_t>(a.max_tiles);
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  for (int64_t i0 = 0; i0 < P; i0 += 32) {
    const int64_t i = i0 + lane;
    const int32_t e = i < P ? expert_of(i) : -1;
    const unsigned same = __match_any_sync(kFullMask, e);
    if (e >= 0) {
      const int32_t r = cursor[e] + __popc(same & ((1u << lane) - 1u));
      a.perm_token[r] = static_cast<int32_t>(static_cast<uint32_t>(i) / static_cast<uint32_t>(a.K));
      a.perm_pos[i] = r;
    }
    __syncwarp();
    if (e >= 0 && lane == __ffs(same) - 1) cursor[e] += __popc(same);
    __syncwarp();
  }
}

// (expert, weight, slot) order of a token's slots: the sum depends on the multiset of (expert,
// weight) pairs only, so reordering a token's slots never changes its bits (two slots naming
// one expert are ordered by weight, not by position).
__device__ __forceinline__ bool SlotBefore(int32_t e1, float w1, int64_t k1, int32_t e2, float w2, int64_t k2) {
  if (e1 != e2) return e1 < e2;
  if (w1 != w2) return w1 < w2;
  return k1 < k2;
}

// One block per token: the first thread orders the token's slots by (expert, weight, slot) into
// shared memory (repeatedly the smallest slot after the previous: K is small), then each thread
// sums its columns over the slots in that order.
__global__ void CombineKernel(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                              ConstMat y, MutMat out) {
  __shared__ int32_t order[kMaxCombineSlots];
  const int64_t t = blockIdx.x;
  const int32_t* ti = idx + t * idx_ld;
  const float* tw = weights.data + t * weights.ld;
  if (threadIdx.x == 0) {
    int64_t prev_k = -1;
    for (int64_t n = 0; n < K; ++n) {
      int64_t bk = -1;
      for (int64_t k = 0; k < K; ++k) {
        if (prev_k >= 0 && !SlotBefore(ti[prev_k], tw[prev_k], prev_k, ti[k], tw[k], k)) continue;
        if (bk < 0 || SlotBefore(ti[k], tw[k], k, ti[bk], tw[bk], bk)) bk = k;
      }
      order[n] = static_cast<int32_t>(bk);  // -1: no slot left (a NaN weight compares unordered)
      if (bk < 0) break;
      prev_k = bk;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < out.cols; j += blockDim.x) {
    float acc = 0.0f;
    for (int64_t n = 0; n < K; ++n) {
      const int32_t k = order[n];
      if (k < 0) break;
      const int32_t r = perm_pos[t * K + k];
      if (r < 0) continue;  // an invalid expert id (reported by the permutation)
      acc = __fadd_rn(acc, __fmul_rn(tw[k], y.data[r * y.ld + j]));  // unfused, as the CPU rounds them
    }
    out.data[t * out.ld + j] = acc;
  }
}

}  // namespace llmrt::cuda::moe

#endif  // LLMRT_KERNELS_MOE_KERNELS_CUH_
