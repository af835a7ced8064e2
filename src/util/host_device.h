// Functions that the host compiler and nvcc both compile, so that a kernel computes exactly the
// bytes the host reference computes (bf16 and e4m3 rounding, synthetic weights): one definition,
// not a device copy kept in step by hand.
//
// LLMRT_HD marks such a function `__host__ __device__` under nvcc and is empty for the host
// compiler. Only what both sides have may appear in their bodies: fixed-width integers, float
// arithmetic (IEEE round to nearest on both; nvcc's default FMA contraction is harmless where
// every product that feeds an addition is exact, which the callers state), and the helpers below.
// Headers that use it stay C++17 (nvcc compiles the kernels as C++17).
#ifndef LLMRT_UTIL_HOST_DEVICE_H_
#define LLMRT_UTIL_HOST_DEVICE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLMRT_HD __host__ __device__
#else
#define LLMRT_HD
#endif

namespace llmrt {

// The IEEE binary32 bits of f, and back.
LLMRT_HD inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
#endif
}

LLMRT_HD inline float BitsFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
#endif
}

// x rounded to an integral value, half to even (the default rounding mode on both sides).
LLMRT_HD inline float RoundHalfEven(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

}  // namespace llmrt

#endif  // LLMRT_UTIL_HOST_DEVICE_H_
