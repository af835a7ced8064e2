// Host stand-in for the CUDA runtime API header in the kernel emulation tests: only the types the
// kernels' plain-C++ headers (kernels/kernels.h) name. No CUDA toolkit is needed to build them.
#ifndef LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_API_H_
#define LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_API_H_

using cudaError_t = int;
using cudaStream_t = struct CUstream_st*;
inline constexpr cudaError_t cudaSuccess = 0;
inline constexpr cudaError_t cudaErrorInvalidValue = 1;

struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }

#endif  // LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_API_H_
