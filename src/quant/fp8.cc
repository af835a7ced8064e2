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

}  // namespace llmrt
