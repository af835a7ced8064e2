// Host stand-in for <cuda_fp8.h> in the kernel emulation tests: the e4m3x2 to half2 conversion,
// the low byte first, each code's value exactly (OCP e4m3fn: bias 7, subnormals m * 2^-9,
// S.1111.111 NaN).
#ifndef LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP8_H_
#define LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP8_H_

#include <cmath>
#include <cstdint>

#include "tests/cuda_emulation/fake/cuda_fp16.h"

using __nv_fp8x2_storage_t = unsigned short;
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };

inline float EmulatedE4M3(unsigned code) {
  const unsigned e = (code >> 3) & 0xfu, m = code & 7u;
  float v;
  if (e == 15u && m == 7u) {
    v = NAN;
  } else if (e == 0u) {
    v = std::ldexp(static_cast<float>(m), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, static_cast<int>(e) - 7);
  }
  return (code & 0x80u) != 0 ? -v : v;
}

inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t pair, __nv_fp8_interpretation_t /*e4m3 only*/) {
  return __half2_raw{EmulatedE4M3(pair & 0xffu), EmulatedE4M3((pair >> 8) & 0xffu)};
}

#endif  // LLMRT_TESTS_CUDA_EMULATION_FAKE_CUDA_FP8_H_
