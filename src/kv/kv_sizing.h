// KV cache sizing from a model's config alone: the one computation behind the runtime's page
// pool and the capacity reports (llm_model_kv_sizing, llm-bench --kv-table).
#ifndef LLMRT_KV_KV_SIZING_H_
#define LLMRT_KV_KV_SIZING_H_

#include <cstdint>

#include "src/backend/backend.h"
#include "src/backend/tensor.h"
#include "src/model/config.h"

namespace llmrt {

struct KvSizing {
  int64_t width = 0;                // elements per token per layer (ModelConfig::KvWidth)
  uint64_t bytes_per_token = 0;     // over all layers
  uint64_t page_bytes = 0;          // bytes_per_token * page_size
  uint64_t pages = 0;               // whole pages in the budget
  uint64_t capacity_tokens = 0;     // pages * page_size
  uint64_t sessions = 0;            // sessions of session_tokens that fit (whole pages each); 0 if not asked
};

// The tiled FP8 row of the model: MLA's latent (and the DSA index key) in FP8 tiles of 128 with
// the rope key in BF16 (656 bytes per token per layer at Kimi K2's sizes); GQA's keys and values
// in FP8 with one scale per head.
KvRowLayout TiledKvLayout(const ModelConfig& c);

// Sizes a cache of `dtype` (F32, BF16, F8E4M3; `tiled`: the tiled FP8 codec) and `page_size`
// tokens per page in `budget_bytes`.
KvSizing SizeKvCache(const ModelConfig& c, DType dtype, uint64_t budget_bytes, int64_t page_size,
                     int64_t session_tokens = 0, bool tiled = false);

}  // namespace llmrt

#endif  // LLMRT_KV_KV_SIZING_H_
