// FP8 E4M3 as OCP's "e4m3fn": 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// NaN is S.1111.111; largest finite 448, smallest normal 2^-6, smallest subnormal 2^-9. The KV
// codecs and FP8 weight formats use it because it keeps 3 significant bits over a wide range in
// one byte, and Hopper tensor cores consume it natively.
#ifndef LLMRT_QUANT_FP8_H_
#define LLMRT_QUANT_FP8_H_

#include <cstdint>

namespace llmrt {

struct Fp8E4M3 {
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kNaN = 0x7f;
  // Round to nearest even; saturates to +-448 (infinities too); NaN stays NaN (sign kept).
  static uint8_t FromFloat(float x);
  static float ToFloat(uint8_t code) { return DecodeTable()[code]; }
  // The value of every code (kernels index it directly).
  static const float* DecodeTable();
};

}  // namespace llmrt

#endif  // LLMRT_QUANT_FP8_H_
