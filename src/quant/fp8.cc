#include "src/quant/fp8.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace llmrt {
namespace {

std::array<float, 256> MakeDecodeTable() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xf, m = c & 7;
    float v;
    if (e == 15 && m == 7) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (e == 0) {
      v = std::ldexp(static_cast<float>(m), -9);
    } else {
      v = std::ldexp(1.0f + m / 8.0f, e - 7);
    }
    t[c] = (c & 0x80) ? -v : v;
  }
  return t;
}

}  // namespace

const float* Fp8E4M3::DecodeTable() {
  static const std::array<float, 256> table = MakeDecodeTable();
  return table.data();
}

uint8_t Fp8E4M3::FromFloat(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(x)) return sign | kNaN;
  const float a = std::fabs(x);
  if (a >= kMax) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal, m * 2^-9, rounded half to even
    const int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(m);  // m == 8 is the smallest normal, encoded the same way
  }
  // Normal: drop 20 of float32's 23 mantissa bits with round-half-even, then rebias 127 -> 7.
  uint32_t mag = bits & 0x7fffffffu;
  mag += 0x7ffffu + ((mag >> 20) & 1u);
  const uint32_t code = (mag >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

}  // namespace llmrt
