// Which calls the tensor-core attention kernel takes, and its shared memory layout.
#include <cstdint>
#include <utility>

#include "kernels/attention_tc.h"

namespace llmrt::cuda {
namespace {

int32_t Round16(int64_t n) { return static_cast<int32_t>((n + 15) / 16 * 16); }

// (segment, tile) of value v of a tiled row: tile -1 for a BF16 segment; segment -1 past them.
std::pair<int, int64_t> TileOf(const KvRowRef& r, int64_t v) {
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& s = r.seg[k];
    if (v >= s.start && v < s.start + s.count) return {k, s.bf16 ? -1 : (v - s.start) / s.tile};
  }
  return {-1, 0};
}

// Whether the values `col_value(col)` of the valid columns [c0, c0 + n) share one tile.
template <typename ColumnValue>
bool OneTile(const KvRowRef& r, int c0, int n, const ColumnValue& col_value) {
  bool first = true;
  std::pair<int, int64_t> key{-1, 0};
  for (int col = c0; col < c0 + n; ++col) {
    const int64_t v = col_value(col);
    if (v < 0) continue;  // padding
    const std::pair<int, int64_t> k = TileOf(r, v);
    if (k.first < 0) return false;
    if (!first && k != key) return false;
    key = k;
    first = false;
  }
  return true;
}

}  // namespace

using tc::kChunk;
using tc::kMaxShared;
using tc::kPad;
using tc::kPf;
using tc::kRows;
using tc::kWarps;

bool PlanTensorCoreAttention(const AttentionArgs& a, TcPlan* pl) {
  if (a.kernel == AttentionKernel::kScalar) return false;
  const KvRowRef& r = a.kv.row;
  if (r.nseg == 0 && r.type != kElemBf16 && r.type != kElemFp8E4M3) return false;
  if (a.dv <= 0 || a.dv > 512 || a.q1_len <= 0 || a.heads <= 0) return false;
  const int64_t q2_len = a.q2 != nullptr ? a.q2_len : 0;
  if (a.q1_len + q2_len > 4096) return false;
  TcPlan p;
  p.dv_tile = 32;
  while (p.dv_tile < a.dv) p.dv_tile *= 2;
  p.terms = a.kernel == AttentionKernel::kTensorCoreBf16 ? 1 : 2;
  const int64_t group = a.k_head_step == 0 && a.v_head_step == 0 ? a.heads : a.kv_group;
  if (group <= 0 || a.heads % group != 0) return false;
  p.group = static_cast<int32_t>(group);
  p.tiles_per_group = static_cast<int32_t>((group + kRows - 1) / kRows);
  p.head_tiles = static_cast<int32_t>(a.heads / group) * p.tiles_per_group;
  p.q1_pad = Round16(a.q1_len);
  p.kpad = p.q1_pad + Round16(q2_len);
  p.ks = p.kpad + kPad;
  const bool v_in_k = a.v_off == a.k1_off && a.v_head_step == a.k_head_step && a.dv <= a.q1_len && p.dv_tile <= p.kpad;
  p.vs = v_in_k ? 0 : p.dv_tile + kPad;
  p.fp8 = r.nseg == 0 && r.type == kElemFp8E4M3 ? 1 : 0;
  p.tiled = r.nseg > 0 ? 1 : 0;
  p.nks = p.tiled ? p.kpad / 16 : 0;
  if (p.tiled) {
    if (p.nks > 256) return false;
    // Every KV head's steps of keys and tiles of values, each within one scale tile.
    for (int64_t gi = 0; gi < a.heads / group; ++gi) {
      const int64_t kv_index = gi * group / a.kv_group;
      const int64_t k1 = a.k1_off + kv_index * a.k_head_step, v_off = a.v_off + kv_index * a.v_head_step;
      const auto key_value = [&](int col) -> int64_t {
        if (col < a.q1_len) return k1 + col;
        if (col >= p.q1_pad && col - p.q1_pad < q2_len) return a.k2_off + (col - p.q1_pad);
        return -1;
      };
      const auto value_value = [&](int col) -> int64_t {
        if (col >= a.dv) return -1;
        return p.vs > 0 ? v_off + col : k1 + col;  // dv <= q1_len when the values are the keys
      };
      for (int c0 = 0; c0 < p.kpad; c0 += 16) {
        if (!OneTile(r, c0, 16, key_value)) return false;
      }
      for (int c0 = 0; c0 < p.dv_tile; c0 += 8) {
        if (!OneTile(r, c0, 8, value_value)) return false;
      }
    }
  }
  p.off_k = p.terms * kRows * p.ks * 2;
  p.off_v = p.off_k + kChunk * p.ks * 2;
  p.off_p = p.off_v + kChunk * p.vs * 2;
  p.off_f = p.off_p + kRows * kPf * 4;
  // rs, valid, red_max, red_sum, the code table, kslot, vslot, kscale, vscale
  p.bytes = p.off_f + kChunk * 4 + kChunk * 4 + 2 * kWarps * kRows * 4 + 256 * 2 + p.nks * 4 + (p.dv_tile / 8) * 4 +
            kChunk * p.nks * 4 + (p.tiled ? kChunk * (p.dv_tile / 8) * 4 : 0);
  const auto fits = [&](int32_t bytes) {
    return bytes <= kMaxShared && (a.max_shared_bytes <= 0 || bytes <= a.max_shared_bytes);
  };
  if (!fits(p.bytes)) return false;
  // Asynchronous row loads: BF16 values copied in place in 16-byte pieces need every column
  // offset and length in whole pieces (8 values) and rows starting 16-byte aligned; FP8 rows are
  // staged whole (row_bytes a multiple of 16). Past the shared memory limit, the warps load.
  const auto whole = [](int64_t x) { return x % 8 == 0; };
  const bool staged = p.fp8 || p.tiled;
  const bool aligned = whole(a.k1_off) && whole(a.k_head_step) && whole(a.q1_len) &&
                       (q2_len == 0 || (whole(a.k2_off) && whole(q2_len))) &&
                       (p.vs == 0 || (whole(a.v_off) && whole(a.v_head_step) && whole(a.dv))) &&
                       a.kv.row_bytes % 16 == 0 && whole(a.kv.width);
  if (aligned) {
    TcPlan q = p;
    q.async = 1;
    q.off_r = Round16(p.bytes);
    q.bytes = q.off_r + kChunk * 8 + kChunk * 4;
    if (staged) {
      q.ss = static_cast<int32_t>(a.kv.row_bytes);
      q.off_s = Round16(q.bytes);
      q.bytes = q.off_s + kChunk * q.ss;
    }
    if (a.kv.row_bytes <= (int64_t{1} << 16) && fits(q.bytes)) p = q;
  }
  *pl = p;
  return true;
}

}  // namespace llmrt::cuda
