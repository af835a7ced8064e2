// Offline checkpoint conversion (llm-convert): writes a Hugging Face checkpoint whose linear
// weights are FP8 e4m3 with block scales (DeepSeek / Kimi / GLM FP8 release format) or INT4
// compressed-tensors pack-quantized (Kimi K2-Thinking format), with the tensor names and
// quantization_config the Hugging Face ecosystem reads.
#ifndef LLMRT_CONVERT_CONVERT_H_
#define LLMRT_CONVERT_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace llmrt {

struct ConvertOptions {
  enum class Target { kFp8Block, kInt4 };
  Target target = Target::kInt4;
  int64_t fp8_block = 128;          // block rows = cols of weight_scale_inv
  int64_t int4_group = 32;          // columns per INT4 scale
  bool int4_all_linears = false;    // false: routed experts only (K2-Thinking); true: every decoder
                                    // linear except kv_b_proj, the router and the DSA indexer
  uint64_t max_shard_bytes = 5ull << 30;
};

// Converts the checkpoint in `in_dir` (BF16, F32 or FP8 block-scaled) into `out_dir` (created;
// must not hold a checkpoint already). Everything not quantized is written as BF16 (F32 tensors
// stay F32); tokenizer and other non-weight files are copied. `summary` receives one line per
// output format with tensor counts and bytes.
absl::Status ConvertCheckpoint(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& options,
                               std::string* summary);

}  // namespace llmrt

#endif  // LLMRT_CONVERT_CONVERT_H_
