// A checkpoint's quantization_config (config.json): how its linear weights are stored.
#ifndef LLMRT_QUANT_QUANT_CONFIG_H_
#define LLMRT_QUANT_QUANT_CONFIG_H_

#include <cstdint>

namespace llmrt {

struct QuantConfig {
  enum class Method { kNone, kFp8Block, kCompressedInt4 };
  Method method = Method::kNone;
  // "fp8": weight_block_size [rows, cols] of each weight_scale_inv entry.
  int64_t block_rows = 0, block_cols = 0;
  // "compressed-tensors", format pack-quantized: 4-bit symmetric int, group strategy.
  int64_t group_size = 0;
};

}  // namespace llmrt

#endif  // LLMRT_QUANT_QUANT_CONFIG_H_
