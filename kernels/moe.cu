// Mixture of experts on the device: noaux_tc routing (one thread per token, the CPU's operations
// and tie rules: src/backend/cpu/moe.cc), the permutation of (token, slot) pairs by expert that
// the grouped GEMMs run over, and the weighted combination of the experts' outputs in expert
// order (as the CPU sums them; slots naming one expert twice by weight), so a token's result does
// not depend on the order of its slots.
#include <cmath>

#include "kernels/common.cuh"

namespace llmrt::cuda {
namespace {

__global__ void RouteKernel(RouteArgs a) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= a.T) return;
  const int64_t E = a.E, per_group = E / a.n_group;
  const float* logits = a.logits + t * E;
  float* choice = a.scratch + t * E;
  // s is recomputed where needed (sigmoid of the logit, the same float expression each time).
  auto sig = [&](int64_t e) { return 1.0f / (1.0f + expf(-logits[e])); };
  for (int64_t e = 0; e < E; ++e) {
    const float b = a.bias != nullptr ? LoadElem(a.bias, a.bias_type, e) : 0.0f;
    choice[e] = sig(e) + b;  // the bias only selects; weights come from s
  }
  if (a.n_group > 1) {
    // Group score: the sum of the group's two best choices; the topk_group best groups stay
    // (ties to the lower group, as a stable sort by score).
    auto group_score = [&](int64_t g) {
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
      return per_group >= 2 ? best + second : best;
    };
    // Ranks first, masks after: masking changes the choices the scores are computed from.
    constexpr int64_t kMaxGroups = 64;
    bool keep[kMaxGroups];
    for (int64_t g = 0; g < a.n_group; ++g) {
      const float sg = group_score(g);
      int64_t rank = 0;
      for (int64_t o = 0; o < a.n_group; ++o) {
        const float so = group_score(o);
        rank += (so > sg || (so == sg && o < g)) ? 1 : 0;
      }
      keep[g] = rank < a.topk_group;
    }
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
  }
  // Top-k by choice, ties to the lower expert; slot k holds the k-th best (the CPU's partial sort).
  int32_t* oi = a.idx + t * a.idx_ld;
  float* ow = a.weights + t * a.weights_ld;
  for (int64_t e = 0; e < E; ++e) {
    int64_t rank = 0;
    for (int64_t o = 0; o < E && rank < a.K; ++o) {
      rank += (choice[o] > choice[e] || (choice[o] == choice[e] && o < e)) ? 1 : 0;
    }
    if (rank < a.K) oi[rank] = static_cast<int32_t>(e);
  }
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

// One block. Thread e (strided) counts expert e's pairs, a serial scan gives offsets and tiles,
// then thread e places its pairs in (token, slot) order.
__global__ void PermuteKernel(PermuteArgs a, int32_t* err) {
  const int64_t P = a.T * a.K;
  int32_t* counts = a.counts;
  int32_t* offsets = a.counts + a.E;
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t i = 0; i < P; ++i) c += a.idx[(i / a.K) * a.idx_ld + i % a.K] == e;
    counts[e] = c;
  }
  for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
    const int32_t e = a.idx[(i / a.K) * a.idx_ld + i % a.K];
    a.perm_pos[i] = -1;
    if (e < 0 || e >= a.E) RaiseError(err, kErrExpert);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0, tiles = 0;
    for (int64_t e = 0; e < a.E; ++e) {
      offsets[e] = off;
      for (int32_t r = 0; r < counts[e]; r += static_cast<int32_t>(kGemmTileRows)) {
        if (tiles < a.max_tiles) {
          a.tile_expert[tiles] = static_cast<int32_t>(e);
          a.tile_row0[tiles] = off + r;
          a.tile_row1[tiles] = off + min(r + static_cast<int32_t>(kGemmTileRows), counts[e]);
        }
        ++tiles;
      }
      off += counts[e];
    }
    a.tile_count[0] = tiles < a.max_tiles ? tiles : static_cast<int32_t>(a.max_tiles);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
    int32_t r = offsets[e];
    for (int64_t i = 0; i < P; ++i) {
      if (a.idx[(i / a.K) * a.idx_ld + i % a.K] != e) continue;
      a.perm_token[r] = static_cast<int32_t>(i / a.K);
      a.perm_pos[i] = r;
      ++r;
    }
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

// One block per token; each thread sums its columns over the token's slots in (expert, weight,
// slot) order.
__global__ void CombineKernel(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                              ConstMat y, MutMat out) {
  const int64_t t = blockIdx.x;
  const int32_t* ti = idx + t * idx_ld;
  const float* tw = weights.data + t * weights.ld;
  for (int64_t j = threadIdx.x; j < out.cols; j += blockDim.x) {
    float acc = 0.0f;
    // Visit the slots in order without sorting: repeatedly the smallest slot after the previous.
    int64_t prev_k = -1;
    for (int64_t n = 0; n < K; ++n) {
      int64_t bk = -1;
      for (int64_t k = 0; k < K; ++k) {
        if (prev_k >= 0 && !SlotBefore(ti[prev_k], tw[prev_k], prev_k, ti[k], tw[k], k)) continue;
        if (bk < 0 || SlotBefore(ti[k], tw[k], k, ti[bk], tw[bk], bk)) bk = k;
      }
      if (bk < 0) break;
      prev_k = bk;
      const int32_t r = perm_pos[t * K + bk];
      if (r < 0) continue;  // an invalid expert id (reported by the permutation)
      acc += tw[bk] * y.data[r * y.ld + j];
    }
    out.data[t * out.ld + j] = acc;
  }
}

}  // namespace

cudaError_t LaunchMoeRoute(const RouteArgs& a, cudaStream_t s) {
  if (a.T == 0) return cudaSuccess;
  RouteKernel<<<BlocksFor(a.T, 64), 64, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchMoePermute(const PermuteArgs& a, int32_t* err, cudaStream_t s) {
  PermuteKernel<<<1, 1024, 0, s>>>(a, err);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                             ConstMat y, MutMat out, cudaStream_t s) {
  if (out.rows == 0) return cudaSuccess;
  CombineKernel<<<static_cast<unsigned>(out.rows), 256, 0, s>>>(idx, idx_ld, weights, perm_pos, K, y, out);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
