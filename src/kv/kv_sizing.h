// KV cache sizing from a codec and a row shape alone: the one computation behind the runtime's
// page pool and the capacity reports (llm_model_kv_sizing, llm-bench --kv-table).
#ifndef LLMRT_KV_KV_SIZING_H_
#define LLMRT_KV_KV_SIZING_H_

#include <cstdint>

#include "src/quant/kv_codec.h"

namespace llmrt {

struct KvSizing {
  int64_t width = 0;                // values per token per layer (KvShape::width)
  uint64_t bytes_per_token = 0;     // over all layers
  uint64_t page_bytes = 0;          // bytes_per_token * page_size
  uint64_t pages = 0;               // whole pages in the budget
  uint64_t capacity_tokens = 0;     // pages * page_size
  uint64_t sessions = 0;            // sessions of session_tokens that fit (whole pages each); 0 if not asked
};

// Sizes a cache of `codec` rows of `shape` and `page_size` tokens per page in `budget_bytes`.
// Products saturate at UINT64_MAX rather than wrap.
KvSizing SizeKvCache(const KvCodec& codec, const KvShape& shape, uint64_t budget_bytes, int64_t page_size,
                     int64_t session_tokens = 0);

}  // namespace llmrt

#endif  // LLMRT_KV_KV_SIZING_H_
