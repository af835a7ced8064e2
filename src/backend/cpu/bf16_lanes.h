// The scalar steps of the `vdpbf16ps` arithmetic (bf16_dot.h), shared by the exact emulations
// of the BF16 weight kernels (bf16_dot.cc) and of the FP8 weight kernels (fp8_bf16_dot.cc), so
// that both emulate the instruction with the same code.
#ifndef LLMRT_BACKEND_CPU_BF16_LANES_H_
#define LLMRT_BACKEND_CPU_BF16_LANES_H_

#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLMRT_BF16_LANES_X86 1
#include <immintrin.h>
#else
#define LLMRT_BF16_LANES_X86 0
#endif

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

#if LLMRT_BF16_LANES_X86
// ReduceLanes of 16 accumulators at once on AVX-512 (for callers compiled for it): the same
// adds in the same tree, each level pairing two accumulators' halves in one register, so the
// same bits. After the four levels, element 4l + j of the result holds the sum of v[4j + l].
__attribute__((target("avx512f"), always_inline)) inline __m512 ReduceLanes16(const __m512 (&v)[16]) {
  constexpr __mmask16 kAll = 0xFFFF;  // (the zero-masked shuffles: GCC 12 warns on the plain ones)
  __m512 p[8], u[4], h[2];
  // l[i] + l[i + 8]: 256-bit halves, two accumulators per register.
  for (int i = 0; i < 8; ++i) {
    p[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_maskz_shuffle_f32x4(kAll, v[2 * i], v[2 * i + 1], 0xEE));
  }
  // + [i + 4]: 128-bit lanes, four accumulators per register.
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, p[2 * i], p[2 * i + 1], 0x88),
                         _mm512_maskz_shuffle_f32x4(kAll, p[2 * i], p[2 * i + 1], 0xDD));
  }
  // r4[0] + r4[2] and r4[1] + r4[3], then their sum.
  for (int i = 0; i < 2; ++i) {
    h[i] = _mm512_add_ps(_mm512_maskz_shuffle_ps(kAll, u[2 * i], u[2 * i + 1], 0x44),
                         _mm512_maskz_shuffle_ps(kAll, u[2 * i], u[2 * i + 1], 0xEE));
  }
  return _mm512_add_ps(_mm512_maskz_shuffle_ps(kAll, h[0], h[1], 0x88), _mm512_maskz_shuffle_ps(kAll, h[0], h[1], 0xDD));
}

// The same from memory: acc[i * 16, i * 16 + 16) -> out[i] (loaded so that v[4j + l] is
// accumulator 4l + j).
__attribute__((target("avx512f"), always_inline)) inline void ReduceLanes16(const float* acc, float* out) {
  __m512 v[16];
  for (int m = 0; m < 16; ++m) v[m] = _mm512_loadu_ps(acc + (4 * (m % 4) + m / 4) * 16);
  _mm512_storeu_ps(out, ReduceLanes16(v));
}

// A 4 x 4 register tile's outputs: v[4r + t] the accumulator of (activation row t, weight row
// r); sums[t * ld + r] = its lane sum (element 4t + r of ReduceLanes16).
__attribute__((target("avx512f"), always_inline)) inline void StoreTileSums4x4(const __m512 (&v)[16], float* sums,
                                                                               int64_t ld) {
  const __m512 s = ReduceLanes16(v);
  _mm_storeu_ps(sums, _mm512_maskz_extractf32x4_ps(0xF, s, 0));
  _mm_storeu_ps(sums + ld, _mm512_maskz_extractf32x4_ps(0xF, s, 1));
  _mm_storeu_ps(sums + 2 * ld, _mm512_maskz_extractf32x4_ps(0xF, s, 2));
  _mm_storeu_ps(sums + 3 * ld, _mm512_maskz_extractf32x4_ps(0xF, s, 3));
}

// ReduceLanes of `count` accumulators, output i to out[(i / per_row) * ldo + i % per_row]: the
// GEMMs' (token, weight row) blocks of accumulators, 16 at a time on AVX-512.
__attribute__((target("avx512f"))) inline void ReduceLanesBlock(const float* acc, int64_t count, int64_t per_row,
                                                                float* out, int64_t ldo) {
  int64_t t = 0, r = 0, i = 0;
  alignas(64) float sums[16];
  for (; i + 16 <= count; i += 16) {
    ReduceLanes16(acc + i * 16, sums);
    for (int j = 0; j < 16; ++j) {
      out[t * ldo + r] = sums[j];
      if (++r == per_row) r = 0, ++t;
    }
  }
  for (; i < count; ++i) {
    out[t * ldo + r] = ReduceLanes(acc + i * 16);
    if (++r == per_row) r = 0, ++t;
  }
}
#endif

}  // namespace llmrt::cpu::bf16_lanes

#endif  // LLMRT_BACKEND_CPU_BF16_LANES_H_
