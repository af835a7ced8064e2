// FP8 E4M3 as OCP's "e4m3fn": 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// NaN is S.1111.111; largest finite 448, smallest normal 2^-6, smallest subnormal 2^-9. The KV
// codecs and FP8 weight formats use it because it keeps 3 significant bits over a wide range in
// one byte, and Hopper tensor cores consume it natively.
#ifndef LLMRT_QUANT_FP8_H_
#define LLMRT_QUANT_FP8_H_

#include <cstdint>

#include "src/util/host_device.h"

namespace llmrt {

struct Fp8E4M3 {
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kNaN = 0x7f;
  // Round to nearest even; saturates to +-448 (infinities too); NaN stays NaN (sign kept).
  // Compiled for the device too (the CUDA kernels' FP8 encode is this function).
  static LLMRT_HD uint8_t FromFloat(float x) {
    const uint32_t bits = FloatBits(x);
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
    const uint32_t mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return sign | kNaN;
    const float a = BitsFloat(mag);
    if (a >= kMax) return sign | 0x7e;
    if (a < 0.015625f) {  // below 2^-6: subnormal, m * 2^-9, rounded half to even (a * 512 is exact)
      const int m = static_cast<int>(RoundHalfEven(a * 512.0f));
      return sign | static_cast<uint8_t>(m);  // m == 8 is the smallest normal, encoded the same way
    }
    // Normal: drop 20 of float32's 23 mantissa bits with round-half-even, then rebias 127 -> 7.
    const uint32_t rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
    const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
    return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
  }
  static float ToFloat(uint8_t code) { return DecodeTable()[code]; }
  // The value of every code (kernels index it directly).
  static const float* DecodeTable();
};

}  // namespace llmrt

#endif  // LLMRT_QUANT_FP8_H_
