// Device helpers shared by the kernels: bfloat16 conversion bit-identical to src/util/bf16.h,
// element loads by type, block reductions, and launch-status plumbing.
#ifndef LLMRT_KERNELS_COMMON_CUH_
#define LLMRT_KERNELS_COMMON_CUH_

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/kernels.h"

namespace llmrt::cuda {

__device__ __forceinline__ float Bf16Bits(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

// Round to nearest even, NaN stays a quiet NaN: the same bits as llmrt::F32ToBf16.
__device__ __forceinline__ uint16_t ToBf16Bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

__device__ __forceinline__ float LoadElem(const void* p, int32_t type, int64_t i) {
  return type == kElemBf16 ? Bf16Bits(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void StoreElem(void* p, int32_t type, int64_t i, float v) {
  if (type == kElemBf16) {
    static_cast<uint16_t*>(p)[i] = ToBf16Bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// Records the first device-detected failure.
__device__ __forceinline__ void RaiseError(int32_t* err, int32_t code) {
  if (err != nullptr) atomicCAS(err, 0, code);
}

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values. The order is fixed by the block size, so a result is reproducible.
template <typename T>
__device__ T BlockSum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = 0;
  for (int i = 0; i < warps; ++i) r += shared[i];
  return r;
}

inline unsigned BlocksFor(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_COMMON_CUH_
