// Host-side definitions of the quantized weight formats (WeightFormat::kFp8Block, kInt4Group):
// scalar dequantization (the reference the SIMD kernels are tested against, and what the loader
// uses for weights that must be dense) and round-to-nearest INT4 quantization.
#ifndef LLMRT_QUANT_WEIGHT_QUANT_H_
#define LLMRT_QUANT_WEIGHT_QUANT_H_

#include <cstdint>

namespace llmrt {

// Row `row` of an FP8 e4m3 matrix [rows, cols] with float32 scales
// [ceil(rows / block_rows), ceil(cols / block_cols)]: out[k] = fp8(q[row, k]) * scale.
void DequantizeFp8BlockRow(const uint8_t* q, const float* scales, int64_t cols, int64_t block_rows,
                           int64_t block_cols, int64_t row, float* out);

// Row `row` of an INT4 matrix stored as bytes [rows, cols / 2] (column 2j in the low nibble of
// byte j, each value q + 8) with bfloat16 scales [rows, cols / group]: out[k] = q * scale.
void DequantizeInt4Row(const uint8_t* packed, const uint16_t* scales, int64_t cols, int64_t group, int64_t row,
                       float* out);

// Quantizes one row of `cols` floats (cols a multiple of group) to INT4 symmetric with round to
// nearest even: scale = max|w| / 7 per group (rounded to bfloat16, the stored dtype), codes
// round(w / scale) clamped to [-8, 7].
void QuantizeInt4Row(const float* w, int64_t cols, int64_t group, uint8_t* packed, uint16_t* scales);

}  // namespace llmrt

#endif  // LLMRT_QUANT_WEIGHT_QUANT_H_
