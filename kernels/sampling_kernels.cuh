// Token sampling's kernel bodies (kernels/sampling.cu describes and launches them): the
// arithmetic of src/backend/sampling.h. In a header of their own so that they compile twice: for
// the device, and on the host in tests/cuda_emulation/ (see attention_tc_kernel.cuh).
#ifndef LLMRT_KERNELS_SAMPLING_KERNELS_CUH_
#define LLMRT_KERNELS_SAMPLING_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/select.cuh"

namespace llmrt::cuda::smp {

inline constexpr int kArgmaxThreads = 256;
inline constexpr int kSortedThreads = 256;  // SampleSortedKernel
inline constexpr int kFastThreads = sel::kSelectThreads;  // SampleFastKernel
inline constexpr int kScanItems = 4;  // consecutive candidates per thread per tile of a scan
// The candidates SampleFastKernel sorts in shared memory: the best of every drawing row.
inline constexpr int kCandidates = 2048;

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double draw;
};

__device__ inline RowParams ReadParams(const int32_t* params, int64_t r) {
  const int32_t* w = params + r * kSamplingParamWords;
  RowParams p;
  p.temperature = __int_as_float(w[0]);
  p.top_k = w[1];
  p.top_p = __int_as_float(w[2]);
  p.min_p = __int_as_float(w[3]);
  const uint64_t lo = static_cast<uint32_t>(w[4]), hi = static_cast<uint32_t>(w[5]);
  p.draw = __longlong_as_double(static_cast<long long>(lo | (hi << 32)));
  return p;
}

__device__ inline bool Draws(const RowParams& p, int64_t vocab) { return p.temperature > 0.0f && vocab > 1; }

// A logit as a candidate's key: NaN as -infinity (never preferred), -0 as +0, so that equal keys
// are the host comparator's ties.
__device__ __forceinline__ float SortKey(float v) { return isnan(v) ? -INFINITY : (v == 0.0f ? 0.0f : v); }

// ---- greedy rows ----

// One block per row: the largest logit, the lowest index among equals; a NaN never wins, and a
// NaN at index 0 is the answer (the host's scan starts there and nothing compares greater than
// it). (logit, index) is a total order, so the reduction's order does not matter.
__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxKernel(ConstMat logits, const int32_t* params, int32_t* ids) {
  const int64_t r = blockIdx.x, V = logits.cols;
  if (Draws(ReadParams(params, r), V)) return;
  const float* row = logits.data + r * logits.ld;
  __shared__ float best_v[32];
  __shared__ int32_t best_i[32];
  float v = -INFINITY;
  int32_t i = static_cast<int32_t>(V);
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    const float x = SortKey(row[c]);
    if (x > v || (x == v && c < i)) v = x, i = static_cast<int32_t>(c);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) best_v[warp] = v, best_i[warp] = i;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
    if (best_v[w] > v || (best_v[w] == v && best_i[w] < i)) v = best_v[w], i = best_i[w];
  }
  ids[r] = isnan(row[0]) ? 0 : (i < V ? i : 0);
}

// ---- rows that draw ----

// Inclusive prefix sums of f(i) over i in [0, n), tile by tile of kScanItems consecutive values a
// thread; calls visit(i, prefix) for every i. Every thread of the block calls it.
template <typename F, typename Visit>
__device__ void ScanCandidates(int64_t n, F f, Visit visit, double* scratch) {
  const int64_t tile = static_cast<int64_t>(blockDim.x) * kScanItems;
  double carry = 0.0;
  for (int64_t base = 0; base < n; base += tile) {
    double v[kScanItems];
    double local = 0.0;
    const int64_t at = base + static_cast<int64_t>(threadIdx.x) * kScanItems;
    for (int k = 0; k < kScanItems; ++k) {
      v[k] = at + k < n ? f(at + k) : 0.0;
      local += v[k];
    }
    double total = 0.0;
    double acc = carry + sel::BlockExclusiveSum(local, scratch, &total);
    for (int k = 0; k < kScanItems && at + k < n; ++k) {
      acc += v[k];
      visit(at + k, acc);
    }
    carry += total;
  }
}

struct WalkShared {
  double scratch[32];
  unsigned long long cut, pick;
};

// SampleRow's walk over the candidates in sorted order (logit descending, index ascending), of
// which the first n of the `keep` kept are at hand: value_at(i) for i < n. mx is the largest
// logit, sum the kept candidates' softmax sum at the temperature (a number). The probabilities
// are cut to the smallest prefix whose mass reaches top_p, then where they fall below min_p times
// the largest, and the token is the first whose cumulative probability exceeds draw times the
// mass left. total_kept() is the mass of all kept candidates, asked only where no cut falls
// within the n at hand (n < keep). Returns the token's sorted position, or -1 where it depends
// on candidates past n. Every thread of the block calls it and gets the same answer.
template <typename ValueAt, typename TotalKept>
__device__ int64_t Walk(int64_t n, int64_t keep, double mx, double sum, const RowParams& p, ValueAt value_at,
                        TotalKept total_kept, WalkShared& ws) {
  const double temp = p.temperature;
  const auto prob = [&](int64_t i) { return exp((static_cast<double>(value_at(i)) - mx) / temp) / sum; };
  const unsigned long long all = static_cast<unsigned long long>(keep);
  if (threadIdx.x == 0) {
    ws.cut = all;
    ws.pick = ~0ull;
  }
  __syncthreads();
  if (p.top_p < 1.0f) {
    const double top_p = p.top_p;
    ScanCandidates(
        n, prob, [&](int64_t i, double acc) {
          if (acc >= top_p) atomicMin(&ws.cut, static_cast<unsigned long long>(i + 1));
        },
        ws.scratch);
    __syncthreads();
    if (ws.cut == all && n < keep) return -1;  // the prefix reaching top_p goes past the n
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob(0);
    const int64_t cut = static_cast<int64_t>(ws.cut), end = cut < n ? cut : n;
    __syncthreads();  // every thread has read the cut before any lowers it
    // Probabilities do not increase along the sorted candidates: the cut is the first below.
    for (int64_t i = 1 + threadIdx.x; i < end; i += blockDim.x) {
      if (!(prob(i) >= floor)) atomicMin(&ws.cut, static_cast<unsigned long long>(i));
    }
    __syncthreads();
    if (ws.cut > static_cast<unsigned long long>(n)) return -1;  // all n pass: the cut is past them
  }
  const int64_t cut = static_cast<int64_t>(ws.cut);
  double total = 0.0;
  if (cut <= n) {
    double part = 0.0;
    for (int64_t i = threadIdx.x; i < cut; i += blockDim.x) part += prob(i);
    total = BlockSum(part, ws.scratch);
  } else {
    total = total_kept();
  }
  const double target = p.draw * total;
  const int64_t m = cut < n ? cut : n;
  ScanCandidates(
      m, prob, [&](int64_t i, double acc) {
        if (acc > target) atomicMin(&ws.pick, static_cast<unsigned long long>(i));
      },
      ws.scratch);
  __syncthreads();
  const unsigned long long pick = ws.pick;
  if (pick < static_cast<unsigned long long>(m)) return static_cast<int64_t>(pick);
  return cut <= n ? cut - 1 : -1;  // the host's fall-through to the last kept, or past the n
}

// Sorts width (a power of two) 64-bit values in shared memory, ascending (a bitonic network).
__device__ inline void BitonicSort(unsigned long long* a, int64_t width) {
  for (int64_t k = 2; k <= width; k <<= 1) {
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
        const int64_t l = i ^ j;
        if (l <= i) continue;
        const unsigned long long x = a[i], y = a[l];
        if ((x > y) == ((i & k) == 0)) {
          a[i] = y;
          a[l] = x;
        }
      }
      __syncthreads();
    }
  }
}

// One block per drawing row j of a chunk (logits row random_rows[first + j]). The row's best
// min(keep, kCandidates) candidates are selected by radix (sel::RadixSelect: keep = top_k, or the
// vocabulary), sorted in shared memory by (logit descending, index ascending), and walked with
// the softmax sum of all kept candidates; that samples the row unless the walk needs candidates
// past those at hand (a flat distribution without top_k, a top_p that the best kCandidates do not
// reach, a draw in the tail) or the sum is not a number. Such a row is handed to the full sort:
// its keys and indices are written to sort_keys / sort_vals at j * V and its segment
// [seg_begin[j], seg_end[j]) is the row; a row sampled here has an empty segment.
__global__ void __launch_bounds__(kFastThreads)
    SampleFastKernel(ConstMat logits, const int32_t* params, const int32_t* random_rows, int64_t first,
                     float* sort_keys, int32_t* sort_vals, int64_t* seg_begin, int64_t* seg_end, int32_t* ids) {
  __shared__ sel::SelectShared sh;
  __shared__ WalkShared ws;
  __shared__ unsigned long long cand[kCandidates];
  const int64_t j = blockIdx.x, V = logits.cols;
  const int64_t r = random_rows[first + j];
  const RowParams p = ReadParams(params, r);
  const float* row = logits.data + r * logits.ld;
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const auto key_at = [&](int64_t i) { return sel::OrderKey(SortKey(row[i])); };
  const int64_t keep = p.top_k > 0 && p.top_k < V ? p.top_k : V;
  const int64_t n = keep < kCandidates ? keep : kCandidates;
  int64_t width = 1;
  while (width < n) width <<= 1;
  for (int64_t i = tid; i < width; i += threads) cand[i] = ~0ull;  // padding sorts last
  __syncthreads();
  const sel::Threshold best = sel::RadixSelect(V, n, key_at, sh);
  sel::TakeSelected(V, best, key_at, sh, [&](int64_t i, int slot, uint32_t key) {
    cand[slot] = (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(i);
  });
  __syncthreads();
  BitonicSort(cand, width);
  const auto value_at = [&](int64_t i) { return sel::KeyFloat(~static_cast<uint32_t>(cand[i] >> 32)); };
  const double mx = value_at(0), temp = p.temperature;
  const auto e = [&](float v) { return exp((static_cast<double>(v) - mx) / temp); };
  // The kept candidates' softmax sum: those at hand, or every logit, or the logits above the
  // keep-th largest key and that key's share of the kept ties.
  sel::Threshold kept{0, 0};
  double local = 0.0;
  if (keep == n) {
    for (int64_t i = tid; i < n; i += threads) local += e(value_at(i));
  } else if (keep == V) {
    for (int64_t i = tid; i < V; i += threads) local += e(SortKey(row[i]));
  } else {
    kept = sel::RadixSelect(V, keep, key_at, sh);
    for (int64_t i = tid; i < V; i += threads) {
      if (key_at(i) > kept.key) local += e(SortKey(row[i]));
    }
    if (tid == 0) local += kept.remaining * e(sel::KeyFloat(kept.key));
  }
  const double sum = BlockSum(local, ws.scratch);
  int64_t at = -1;
  if (sum == sum) {
    const auto total_kept = [&]() {
      double part = 0.0;
      for (int64_t i = tid; i < V; i += threads) {
        if (keep == V || key_at(i) > kept.key) part += e(SortKey(row[i])) / sum;
      }
      if (keep < V && tid == 0) part += kept.remaining * (e(sel::KeyFloat(kept.key)) / sum);
      return BlockSum(part, ws.scratch);
    };
    at = Walk(n, keep, mx, sum, p, value_at, total_kept, ws);
  }
  if (tid == 0) {
    seg_begin[j] = j * V;
    seg_end[j] = j * V + (at < 0 ? V : 0);
    if (at >= 0) ids[r] = static_cast<int32_t>(cand[at] & 0xffffffffu);
  }
  if (at >= 0) return;
  for (int64_t i = tid; i < V; i += threads) {
    sort_keys[j * V + i] = SortKey(row[i]);
    sort_vals[j * V + i] = static_cast<int32_t>(i);
  }
}

// One block per drawing row j of a chunk whose segment is not empty: the row's candidates sorted
// by (key descending, index ascending) in keys / vals at j * V, walked in full.
__global__ void __launch_bounds__(kSortedThreads)
    SampleSortedKernel(const float* keys, const int32_t* vals, int64_t V, const int32_t* params,
                       const int32_t* random_rows, int64_t first, const int64_t* seg_begin, const int64_t* seg_end,
                       int32_t* ids) {
  const int64_t j = blockIdx.x;
  if (seg_end[j] == seg_begin[j]) return;  // SampleFastKernel sampled it
  __shared__ WalkShared ws;
  const int64_t r = random_rows[first + j];
  const RowParams p = ReadParams(params, r);
  const float* key = keys + j * V;
  const int32_t* id = vals + j * V;
  const int64_t keep = p.top_k > 0 && p.top_k < V ? p.top_k : V;
  const double mx = key[0], temp = p.temperature;
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) local += exp((static_cast<double>(key[i]) - mx) / temp);
  const double sum = BlockSum(local, ws.scratch);
  if (!(sum == sum)) {
    // Every probability is NaN (an infinite largest logit, or none finite): the host's loops
    // then cut nothing by top_p, min_p keeps one token, and the draw falls through to the last.
    if (threadIdx.x == 0) ids[r] = id[p.min_p > 0.0f ? 0 : keep - 1];
    return;
  }
  const int64_t at = Walk(
      keep, keep, mx, sum, p, [&](int64_t i) { return key[i]; }, [] { return 0.0; }, ws);
  if (threadIdx.x == 0) ids[r] = id[at];
}

}  // namespace llmrt::cuda::smp

#endif  // LLMRT_KERNELS_SAMPLING_KERNELS_CUH_
