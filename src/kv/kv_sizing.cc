#include "src/kv/kv_sizing.h"

#include <limits>

namespace llmrt {
namespace {

uint64_t SatMul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::numeric_limits<uint64_t>::max();
  return a * b;
}

}  // namespace

KvSizing SizeKvCache(const KvCodec& codec, const KvShape& shape, uint64_t budget_bytes, int64_t page_size,
                     int64_t session_tokens) {
  KvSizing s;
  s.width = shape.width();
  const uint64_t row = static_cast<uint64_t>(codec.Layout(shape).row_bytes);
  s.bytes_per_token = SatMul(static_cast<uint64_t>(shape.num_layers), row);
  s.page_bytes = SatMul(s.bytes_per_token, static_cast<uint64_t>(page_size));
  s.pages = s.page_bytes == 0 ? 0 : budget_bytes / s.page_bytes;
  s.capacity_tokens = SatMul(s.pages, static_cast<uint64_t>(page_size));
  if (session_tokens > 0 && page_size > 0) {
    const uint64_t per_session = static_cast<uint64_t>((session_tokens + page_size - 1) / page_size);
    s.sessions = s.pages / per_session;
  }
  return s;
}

}  // namespace llmrt
