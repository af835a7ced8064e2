// Device helpers shared by the kernels: bfloat16 and e4m3 conversion (the host's own functions,
// compiled for the device), element loads by type, block reductions, and launch-status plumbing.
#ifndef LLMRT_KERNELS_COMMON_CUH_
#define LLMRT_KERNELS_COMMON_CUH_

#include <atomic>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt::cuda {

__device__ __forceinline__ float Bf16Bits(uint16_t v) { return Bf16ToF32(v); }

// Round to nearest even, NaN stays a quiet NaN: llmrt::F32ToBf16 itself (src/util/bf16.h).
__device__ __forceinline__ uint16_t ToBf16Bits(float f) { return F32ToBf16(f); }

// The same rounding in one instruction on the device (cvt.rn.bf16.f32), for arithmetic operands:
// a NaN may come out with another payload than ToBf16Bits gives (still a NaN), so stored bytes
// that must equal the CPU codecs' use ToBf16Bits.
__device__ __forceinline__ uint16_t RoundBf16(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
#else
  return F32ToBf16(f);
#endif
}

// Two bfloat16 values (rounded to nearest even), `low` in the low half: one cvt on the device
// (its first source goes to the upper half).
__device__ __forceinline__ uint32_t PackBf16(float low, float high) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(high), "f"(low));
  return d;
#else
  return static_cast<uint32_t>(RoundBf16(low)) | (static_cast<uint32_t>(RoundBf16(high)) << 16);
#endif
}

// The e4m3 pair in the low 16 bits of `pair` as two bfloat16 values (the low byte in the low
// half), exact: e4m3x2 -> f16x2 (one instruction from sm_89 on), float32, one bf16x2 cvt.
__device__ __forceinline__ uint32_t Fp8PairToBf16(uint32_t pair) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(raw));
  return PackBf16(f.x, f.y);
}

// The maxima / sums of two values over each quad of lanes (lanes 4q .. 4q + 3: an MMA
// fragment's row), left in every lane of the quad.
__device__ __forceinline__ void QuadMax(float& a, float& b) {
  for (int x = 1; x <= 2; x <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, x));
    b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, x));
  }
}
__device__ __forceinline__ void QuadSum(float& a, float& b) {
  for (int x = 1; x <= 2; x <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, x);
    b += __shfl_xor_sync(0xffffffffu, b, x);
  }
}

// The value of an e4m3fn code (OCP: bias 7, subnormals m * 2^-9, S.1111.111 NaN, no
// infinities): the same floats as llmrt::Fp8E4M3::DecodeTable, built from the bits.
__device__ __forceinline__ float Fp8ToFloat(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24, e = (code >> 3) & 0xfu, m = code & 7u;
  float v;
  if (e == 15u && m == 7u) {
    v = __uint_as_float(0x7fc00000u);
  } else if (e == 0u) {
    v = static_cast<float>(m) * 0x1p-9f;  // exact
  } else {
    v = __uint_as_float(((e + 120u) << 23) | (m << 20));
  }
  return __uint_as_float(__float_as_uint(v) | sign);
}

// float to e4m3fn with round to nearest even, saturating to +-448 (infinities too), NaN kept
// (sign kept): llmrt::Fp8E4M3::FromFloat itself (src/quant/fp8.h).
__device__ __forceinline__ uint8_t FloatToFp8(float x) { return Fp8E4M3::FromFloat(x); }

// The block-scale rows of a thread's columns of FP8 block-scaled weights (blocks of `rows` weight
// rows): columns first + 8 j + q (q 0 or 1; the MMA fragments' pairs) are walked in steps of 8
// from one division, where a division per column (64-bit, about a hundred instructions) made
// folding a column block's sums cost several times its MMAs. After j steps, RowOf(q) is column
// first + 8 j + q's row.
struct ScaleRowWalk {
  int64_t row;
  int32_t rem, rows;
  __device__ __forceinline__ ScaleRowWalk(int64_t first, int64_t block_rows)
      : row(first / block_rows),
        rem(static_cast<int32_t>(first % block_rows)),
        rows(static_cast<int32_t>(block_rows)) {}
  __device__ __forceinline__ int64_t RowOf(int q) const { return row + (rem + q >= rows ? 1 : 0); }
  __device__ __forceinline__ void Step8() {
    rem += 8;
    while (rem >= rows) {
      rem -= rows;
      ++row;
    }
  }
};

// An element of a flat array: F32, BF16 or (unscaled) FP8 codes.
__device__ __forceinline__ float LoadElem(const void* p, int32_t type, int64_t i) {
  if (type == kElemBf16) return Bf16Bits(static_cast<const uint16_t*>(p)[i]);
  if (type == kElemFp8E4M3) return Fp8ToFloat(static_cast<const uint8_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Element (n, k) of a weight of any format, as its scalar reference dequantizes it
// (DequantizeFp8BlockRow, DequantizeInt4Row: one float32 product of the code and its scale).
__device__ __forceinline__ float LoadWeight(const void* data, int32_t type, const void* scales, const WeightRef& l,
                                            int64_t n, int64_t k, int64_t K) {
  if (type == kElemFp8E4M3) {
    const int64_t nbc = (K + l.block_cols - 1) / l.block_cols;
    const float s = static_cast<const float*>(scales)[(n / l.block_rows) * nbc + k / l.block_cols];
    return Fp8ToFloat(static_cast<const uint8_t*>(data)[n * K + k]) * s;
  }
  if (type == kElemInt4) {
    const uint8_t b = static_cast<const uint8_t*>(data)[n * (K / 2) + k / 2];
    const int q = static_cast<int>((k & 1) != 0 ? b >> 4 : b & 0xf) - 8;
    return static_cast<float>(q) * Bf16Bits(static_cast<const uint16_t*>(scales)[n * (K / l.group) + k / l.group]);
  }
  return type == kElemBf16 ? Bf16Bits(static_cast<const uint16_t*>(data)[n * K + k])
                           : static_cast<const float*>(data)[n * K + k];
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

// Exclusive prefix sums over the block, in thread order, of two counts at once (blockDim.x a
// multiple of 32, at most 1024): a and b become the sums of the threads before this one, *total_a
// and *total_b the block's. `shared` holds 64 values.
__device__ inline void BlockExclusiveSum2(int32_t& a, int32_t& b, int32_t* shared, int32_t* total_a,
                                          int32_t* total_b) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int32_t ia = a, ib = b;  // inclusive within the warp
  for (unsigned o = 1; o < 32; o <<= 1) {
    const int32_t xa = __shfl_up_sync(0xffffffffu, ia, o), xb = __shfl_up_sync(0xffffffffu, ib, o);
    if (lane >= static_cast<int>(o)) {
      ia += xa;
      ib += xb;
    }
  }
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 31) {
    shared[warp] = ia;
    shared[32 + warp] = ib;
  }
  __syncthreads();
  int32_t before_a = 0, before_b = 0, all_a = 0, all_b = 0;
  for (int i = 0; i < warps; ++i) {
    if (i < warp) {
      before_a += shared[i];
      before_b += shared[32 + i];
    }
    all_a += shared[i];
    all_b += shared[32 + i];
  }
  a = before_a + ia - a;
  b = before_b + ib - b;
  *total_a = all_a;
  *total_b = all_b;
}

inline unsigned BlocksFor(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

#ifndef LLMRT_CUDA_EMULATION
// Lets `kernel` be launched with `bytes` of dynamic shared memory on the current device (above
// 48 KiB it must be allowed explicitly); `optin` is the device's limit per block (0: asked here).
// The allowance is a per-function cap that every host thread sets, so it is always set to the
// most the kernel may take, the same value from every caller: one thread never lowers it under
// another's larger launch (the launch's own size still decides how many blocks fit). That is the
// device's limit less the kernel's static shared memory (the driver refuses a cap past it).
// cudaErrorInvalidValue where the device does not allow `bytes`.
template <typename Kernel>
inline cudaError_t AllowDynamicShared(Kernel kernel, int64_t bytes, int64_t optin = 0) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  if (optin <= 0) {
    int device = 0, v = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    if (const cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        e != cudaSuccess) {
      return e;
    }
    optin = v;
  }
  cudaFuncAttributes attr{};
  if (const cudaError_t e = cudaFuncGetAttributes(&attr, kernel); e != cudaSuccess) return e;
  const int64_t cap = optin - static_cast<int64_t>(attr.sharedSizeBytes);
  if (bytes > cap) return cudaErrorInvalidValue;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cap));
}

// A kernel that takes more than 48 KiB of dynamic shared memory (AllowDynamicShared) and all of
// the unified L1 / shared memory as shared memory, so that the blocks a plan counts on fit on a
// multiprocessor (their rows bypass L1: cp.async.cg).
template <typename Kernel>
inline cudaError_t AllowLargeShared(Kernel kernel, int64_t bytes, int64_t optin) {
  if (const cudaError_t e = AllowDynamicShared(kernel, bytes, optin); e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

// AllowLargeShared once per device for a kernel launched often (decode passes that are not
// recorded run it every layer): `done` holds a bit per device (below 64) already set; devices
// from 64 set it every call. (A device reset would clear the attributes; the backend never
// resets one.)
template <typename Kernel>
inline cudaError_t AllowLargeSharedOnce(Kernel kernel, int64_t bytes, std::atomic<uint64_t>* done) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done->load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t e = AllowLargeShared(kernel, bytes, 0);
  if (e == cudaSuccess) done->fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

// The block's dynamic shared memory (the launch's third parameter), 16-byte aligned. (The host
// emulation of tests/cuda_emulation/ defines its own.)
template <typename T>
__device__ __forceinline__ T* DynamicShared() {
  extern __shared__ __align__(16) unsigned char llmrt_dynamic_shared[];
  return reinterpret_cast<T*>(llmrt_dynamic_shared);
}
#endif

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_COMMON_CUH_
