#include "src/kv/kv_sizing.h"

namespace llmrt {

KvRowLayout TiledKvLayout(const ModelConfig& c) {
  KvRowLayout l;
  l.width = c.KvWidth();
  auto add = [&](int64_t count, bool bf16, int64_t tile) {
    KvSegment s;
    s.start = l.segments.empty() ? 0 : l.segments.back().start + l.segments.back().count;
    s.count = count;
    s.bf16 = bf16;
    s.tile = tile;
    l.segments.push_back(s);
  };
  if (c.family == ArchFamily::kGlm4Moe) {
    add(2 * c.num_kv_heads * c.head_dim, false, c.head_dim);  // K heads then V heads, a scale per head
  } else {
    add(c.kv_lora_rank, false, 128);
    add(c.qk_rope_head_dim, true, 0);
    if (c.HasIndexer()) add(c.index_head_dim, false, 128);
  }
  int64_t bytes = 0, scales = 0;
  for (KvSegment& s : l.segments) {
    s.byte_offset = bytes;
    bytes += s.bf16 ? 2 * s.count : s.count;
    if (!s.bf16) {
      s.first_scale = scales;
      scales += (s.count + s.tile - 1) / s.tile;
    }
  }
  l.scale_offset = bytes;
  l.row_bytes = bytes + 4 * scales;
  return l;
}

KvSizing SizeKvCache(const ModelConfig& c, DType dtype, uint64_t budget_bytes, int64_t page_size,
                     int64_t session_tokens, bool tiled) {
  KvSizing s;
  s.width = c.KvWidth();
  const uint64_t row = tiled ? static_cast<uint64_t>(TiledKvLayout(c).row_bytes)
                             : static_cast<uint64_t>(s.width) * DTypeSize(dtype);
  s.bytes_per_token = static_cast<uint64_t>(c.num_layers) * row;
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
