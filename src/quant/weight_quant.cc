#include "src/quant/weight_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt {

void DequantizeFp8BlockRow(const uint8_t* q, const float* scales, int64_t cols, int64_t block_rows,
                           int64_t block_cols, int64_t row, float* out) {
  const int64_t nbc = (cols + block_cols - 1) / block_cols;
  const float* s = scales + (row / block_rows) * nbc;
  const uint8_t* r = q + row * cols;
  for (int64_t k = 0; k < cols; ++k) {
    float scale;  // checkpoint bytes need not be aligned
    std::memcpy(&scale, s + k / block_cols, sizeof(scale));
    out[k] = Fp8E4M3::ToFloat(r[k]) * scale;
  }
}

void DequantizeInt4Row(const uint8_t* packed, const uint16_t* scales, int64_t cols, int64_t group, int64_t row,
                       float* out) {
  const uint8_t* p = packed + row * (cols / 2);
  const uint16_t* s = scales + row * (cols / group);
  for (int64_t k = 0; k < cols; ++k) {
    const int nib = (k % 2 == 0) ? (p[k / 2] & 0xF) : (p[k / 2] >> 4);
    uint16_t scale;  // checkpoint bytes need not be aligned
    std::memcpy(&scale, s + k / group, sizeof(scale));
    out[k] = static_cast<float>(nib - 8) * Bf16ToF32(scale);
  }
}

void QuantizeInt4Row(const float* w, int64_t cols, int64_t group, uint8_t* packed, uint16_t* scales) {
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* x = w + g * group;
    float amax = 0.0f;
    for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const uint16_t sb = F32ToBf16(std::max(amax / 7.0f, 1e-12f));  // zero groups: a tiny scale, codes 0
    scales[g] = sb;
    const float s = Bf16ToF32(sb);
    for (int64_t i = 0; i < group; ++i) {
      const int q = static_cast<int>(std::clamp(std::nearbyint(x[i] / s), -8.0f, 7.0f)) + 8;
      const int64_t k = g * group + i;
      uint8_t& b = packed[k / 2];
      b = (k % 2 == 0) ? static_cast<uint8_t>((b & 0xF0) | q) : static_cast<uint8_t>((b & 0x0F) | (q << 4));
    }
  }
}

}  // namespace llmrt
