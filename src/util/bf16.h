// bfloat16 <-> float32 conversion. bf16 is the top 16 bits of an IEEE binary32: 8 exponent bits,
// 7 mantissa bits, the range of f32 with about 3 significant decimal digits. Checkpoints store
// most weights in it. The two conversions compile for the device too (src/util/host_device.h):
// the CUDA kernels round with these very functions.
#ifndef LLMRT_UTIL_BF16_H_
#define LLMRT_UTIL_BF16_H_

#include <cstddef>
#include <cstdint>

#include "src/util/host_device.h"

namespace llmrt {

LLMRT_HD inline float Bf16ToF32(uint16_t v) { return BitsFloat(static_cast<uint32_t>(v) << 16); }

// Round to nearest even, NaN stays NaN (quiet), as torch's float -> bfloat16 cast.
LLMRT_HD inline uint16_t F32ToBf16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void Bf16ToF32Array(const uint16_t* in, float* out, size_t n);
void F32ToBf16Array(const float* in, uint16_t* out, size_t n);

}  // namespace llmrt

#endif  // LLMRT_UTIL_BF16_H_
