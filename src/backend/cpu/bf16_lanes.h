// The scalar steps of the `vdpbf16ps` arithmetic (bf16_dot.h), shared by the exact emulations
// of the BF16 weight kernels (bf16_dot.cc) and of the FP8 weight kernels (fp8_bf16_dot.cc), so
// that both emulate the instruction with the same code.
#ifndef LLMRT_BACKEND_CPU_BF16_LANES_H_
#define LLMRT_BACKEND_CPU_BF16_LANES_H_

#include <cmath>
#include <cstdint>

#include "src/util/bf16.h"

namespace llmrt::cpu::bf16_lanes {

// A denormal read as (or flushed to) a zero of its sign: the instruction's DAZ and FTZ.
inline float FlushDenormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// One step of a `vdpbf16ps` lane: a float32 fused multiply-add, denormals in and out flushed.
// (std::fma rounds once, to nearest even: the default rounding mode, which llmrt never changes.)
inline float DpStep(float acc, uint16_t a, uint16_t b) {
  return FlushDenormal(std::fma(FlushDenormal(Bf16ToF32(a)), FlushDenormal(Bf16ToF32(b)), FlushDenormal(acc)));
}

// The 16 lanes of an output, added in the fixed tree of bf16_dot.h: l[i] + l[i + 8], then
// + [i + 4], + [i + 2], + [i + 1] (ordinary float32 adds).
inline float ReduceLanes(const float* l) {
  float r8[8], r4[4];
  for (int i = 0; i < 8; ++i) r8[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) r4[i] = r8[i] + r8[i + 4];
  return (r4[0] + r4[2]) + (r4[1] + r4[3]);
}

}  // namespace llmrt::cpu::bf16_lanes

#endif  // LLMRT_BACKEND_CPU_BF16_LANES_H_
