#include "src/kv/kv_sizing.h"

namespace llmrt {

KvSizing SizeKvCache(const ModelConfig& c, DType dtype, uint64_t budget_bytes, int64_t page_size,
                     int64_t session_tokens) {
  KvSizing s;
  s.width = c.KvWidth();
  s.bytes_per_token = static_cast<uint64_t>(c.num_layers * s.width) * DTypeSize(dtype);
  s.page_bytes = s.bytes_per_token * static_cast<uint64_t>(page_size);
  s.pages = s.page_bytes == 0 ? 0 : budget_bytes / s.page_bytes;
  s.capacity_tokens = s.pages * static_cast<uint64_t>(page_size);
  if (session_tokens > 0) {
    const uint64_t per_session = static_cast<uint64_t>((session_tokens + page_size - 1) / page_size);
    s.sessions = s.pages / per_session;
  }
  return s;
}

}  // namespace llmrt
