// Host stand-in for <cuda_fp16.h> in the kernel emulation tests: a pair of half values is carried
// as the floats they hold (every value the kernels convert through half is exact in float).
#ifndef LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP16_H_
#define LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP16_H_

#include "tests/cuda_emulation/fake/cuda_runtime_api.h"

struct __half2_raw {
  float x, y;
};
struct __half2 {
  explicit __half2(const __half2_raw& r) : x(r.x), y(r.y) {}
  float x, y;
};
inline float2 __half22float2(const __half2& h) { return float2{h.x, h.y}; }

#endif  // LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP16_H_
