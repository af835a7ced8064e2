// Block-wide selection by radix and block scans, shared by the DSA top-k (kv_kernels.cuh) and
// token sampling (sampling_kernels.cuh). Device code without cub, so that tests/cuda_emulation/
// compiles and runs it on the host.
#ifndef LLMRT_KERNELS_SELECT_CUH_
#define LLMRT_KERNELS_SELECT_CUH_

#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda::sel {

// A float's bits mapped so that unsigned order is float order (a NaN with the sign clear above
// +infinity, one with it set below -infinity).
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// The float whose OrderKey is k.
__device__ __forceinline__ float KeyFloat(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

inline constexpr int kSelectThreads = 1024, kSelectWarps = kSelectThreads / 32;

// The exclusive prefix sum of v over the block's threads in thread order, and the block's total
// in *total; every thread calls it (blockDim.x a multiple of 32). scratch: 32 T of shared memory.
// The additions' order depends only on the block size, so a sum of doubles is reproducible.
template <typename T>
__device__ __forceinline__ T BlockExclusiveSum(T v, T* scratch, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  T x = v;  // inclusive over the warp
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  T before = __shfl_up_sync(0xffffffffu, x, 1);  // exclusive over the warp
  if (lane == 0) before = T(0);
  __syncthreads();  // scratch may still be read by a previous block reduction
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {  // inclusive over the warps' sums
    T s = lane < warps ? scratch[lane] : T(0);
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    if (lane < warps) scratch[lane] = s;
  }
  __syncthreads();
  const T warp_before = warp > 0 ? scratch[warp - 1] : T(0);
  *total = scratch[warps - 1];
  __syncthreads();  // scratch is rewritten by the next call
  return warp_before + before;
}

// Shared memory of RadixSelect and TakeSelected.
struct SelectShared {
  int hist[256];
  int scratch[32];
  int digit, remaining;
};

// The k-th largest of the n keys key_at(0 .. n-1), and how many of the keys equal
// to it rank among the k largest when equal keys rank by position: the first `remaining` of them.
// A radix select, 8 bits a pass: each pass counts a 256-bin histogram of the keys that match the
// digits found so far (one shared atomic per distinct bin a warp), then takes the bin where the
// count from the top reaches the number still to take. Every thread of the block calls it.
struct Threshold {
  uint32_t key;
  int remaining;
};
template <typename KeyAt>
__device__ Threshold RadixSelect(int64_t n, int64_t k, KeyAt key_at, SelectShared& sh) {
  // Outside 1 <= k < n: nothing (no key above the largest, none of its ties), or everything
  // (every key at or above the smallest).
  if (k <= 0) return Threshold{0xffffffffu, 0};
  if (k >= n) return Threshold{0u, static_cast<int>(n)};
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, threads = static_cast<int>(blockDim.x);
  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(k);  // how many of the keys matching `prefix` are still to be taken
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += threads) sh.hist[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += threads) {  // uniform trip count: whole warps
      const int64_t p = base + tid;
      int bin = -1;
      if (p < n) {
        const uint32_t key = key_at(p);
        if ((key & mask) == prefix) bin = static_cast<int>((key >> shift) & 255u);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin >= 0 && lane == __ffs(static_cast<int>(peers)) - 1) atomicAdd(&sh.hist[bin], __popc(peers));
    }
    __syncthreads();
    // Thread i < 256 holds bin 255 - i: the keys above it are the exclusive sum.
    const int h = tid < 256 ? sh.hist[255 - tid] : 0;
    int all = 0;
    const int above = BlockExclusiveSum(h, sh.scratch, &all);
    if (tid < 256 && above < remaining && above + h >= remaining) {  // exactly one bin
      sh.digit = 255 - tid;
      sh.remaining = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    mask |= 255u << shift;
    remaining = sh.remaining;
    __syncthreads();  // digit, remaining and hist are rewritten by the next pass
  }
  return Threshold{prefix, remaining};
}

// Calls take(p, slot, key) for each of the k positions that RadixSelect's threshold th selects
// among key_at(0 .. n-1) (every larger key, and the first th.remaining positions holding th.key),
// slot being p's rank among them in ascending position order. Each thread takes a contiguous range
// of positions, and two block scans (the threshold key's occurrences before the range, the
// positions taken before it) tell each range which of its positions to take and where. Every
// thread of the block calls it.
template <typename KeyAt, typename Take>
__device__ void TakeSelected(int64_t n, Threshold th, KeyAt key_at, SelectShared& sh, Take take) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int64_t per = (n + threads - 1) / threads;
  const int64_t lo = tid * per < n ? tid * per : n, hi = lo + per < n ? lo + per : n;
  int eq = 0, gt = 0;
  for (int64_t p = lo; p < hi; ++p) {
    const uint32_t key = key_at(p);
    eq += key == th.key ? 1 : 0;
    gt += key > th.key ? 1 : 0;
  }
  int total = 0;
  const int eq_before = BlockExclusiveSum(eq, sh.scratch, &total);
  const int left = th.remaining - eq_before;
  const int eq_take = left <= 0 ? 0 : (left < eq ? left : eq);
  int slot = BlockExclusiveSum(gt + eq_take, sh.scratch, &total);
  int eq_seen = 0;
  for (int64_t p = lo; p < hi; ++p) {
    const uint32_t key = key_at(p);
    if (key > th.key || (key == th.key && eq_seen++ < eq_take)) take(p, slot++, key);
  }
}

}  // namespace llmrt::cuda::sel

#endif  // LLMRT_KERNELS_SELECT_CUH_
