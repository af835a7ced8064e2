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
  p.terms = a.kernel == AttentionKernel::kTensorCore ? 2 : 1;  // kWgmma's fallback: its numerics
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
  // The query's 16-byte pieces are swizzled where its rows are whole groups of 8 pieces (no
  // padding needed for conflict-free ldmatrix; it saves the shared memory that lets Kimi K2's
  // two-stage plan keep two blocks a multiprocessor); other widths pad each row instead.
  p.qx = p.kpad % 64 == 0 ? 7 : 0;
  p.qstride = p.qx != 0 ? p.kpad : p.ks;
  const bool staged = p.fp8 || p.tiled;
  const int32_t kv_steps = p.dv_tile / 8;
  p.qreg = a.query_in_registers && p.kpad <= 16 * kWarps * tc::QuerySteps(p.dv_tile) ? 1 : 0;
  // A tile's query area holds its warps' partial scores ([kWarps][kRows][kPf] floats) once its
  // fragments are in registers.
  const int32_t query_bytes = p.terms * kRows * p.qstride * 2, partial_bytes = kWarps * kRows * kPf * 4;
  p.qbytes = Round16(p.qreg && partial_bytes > query_bytes ? partial_bytes : query_bytes);
  // The layout of a plan with `async` loads in `stages` stages (BF16 rows in place alternate
  // their K / V tiles; staged FP8 rows alternate their staging area) for q.tiles head tiles.
  const auto layout = [&](TcPlan q, bool async, int32_t stages) {
    q.async = async ? 1 : 0;
    q.stages = async ? stages : 1;
    q.tile_stages = async && !staged ? q.stages : 1;
    q.off_k = q.tiles * q.qbytes;
    q.off_v = q.off_k + q.tile_stages * kChunk * q.ks * 2;
    q.off_p = q.off_v + q.tile_stages * kChunk * q.vs * 2;
    q.off_f = q.off_p + q.tiles * kRows * kPf * 4;
    // red_max, red_sum (per tile), kslot, vslot, kscale, vscale (tiled only)
    const int32_t f = 2 * q.tiles * kWarps * kRows * 4 + q.nks * 4 +
                      (q.tiled ? kv_steps * 4 : 0) + kChunk * q.nks * 4 + (q.tiled ? kChunk * kv_steps * 4 : 0);
    q.off_r = Round16(q.off_f + f);
    q.bytes = q.off_r + q.stages * tc::kMetaBytes;
    q.ss = 0;
    q.off_s = 0;
    if (async && staged) {
      q.ss = static_cast<int32_t>(a.kv.row_bytes);
      q.off_s = Round16(q.bytes);
      q.bytes = q.off_s + q.stages * kChunk * q.ss;
    }
    return q;
  };
  const auto fits = [&](int32_t bytes) {
    return bytes <= kMaxShared && (a.max_shared_bytes <= 0 || bytes <= a.max_shared_bytes);
  };
  // Blocks a multiprocessor holds: by shared memory, and by registers (the launch bounds' count).
  const auto resident = [&](const TcPlan& q) -> int32_t {
    if (a.sm_shared_bytes <= 0) return 0;
    const int32_t by_registers = tc::MinBlocks(q.dv_tile, q.tiles);
    const int64_t n = a.sm_shared_bytes / (q.bytes + a.reserved_shared_bytes);
    return static_cast<int32_t>(n < by_registers ? n : by_registers);
  };
  // Asynchronous row loads: BF16 values copied in place in 16-byte pieces need every column
  // offset and length in whole pieces (8 values) and rows starting 16-byte aligned; FP8 rows are
  // staged whole (row_bytes a multiple of 16). Past the shared memory limit, the warps load.
  const auto whole = [](int64_t x) { return x % 8 == 0; };
  const bool aligned = whole(a.k1_off) && whole(a.k_head_step) && whole(a.q1_len) &&
                       (q2_len == 0 || (whole(a.k2_off) && whole(q2_len))) &&
                       (p.vs == 0 || (whole(a.v_off) && whole(a.v_head_step) && whole(a.dv))) &&
                       a.kv.row_bytes % 16 == 0 && whole(a.kv.width) && a.kv.row_bytes <= (int64_t{1} << 16);
  // The plan for `tiles` head tiles a block (false where even the simplest layout does not fit).
  const auto plan_for = [&](int32_t tiles, TcPlan* out) {
    TcPlan q = p;
    q.tiles = tiles;
    q.head_blocks = q.head_tiles / tiles;
    TcPlan chosen = layout(q, false, 1);
    if (!fits(chosen.bytes)) return false;
    if (aligned) {
      const TcPlan one = layout(q, true, 1), two = layout(q, true, 2);
      bool pipelined = false;
      if (a.stages == 2) {
        pipelined = fits(two.bytes);
      } else if (a.stages == 0 && fits(two.bytes)) {
        // Automatic: two stages where they keep as many blocks on a multiprocessor (unknown
        // multiprocessor: one).
        const int32_t r1 = resident(one), r2 = resident(two);
        pipelined = r2 > 0 && r2 >= r1;
      }
      if (pipelined) {
        chosen = two;
      } else if (fits(one.bytes)) {
        chosen = one;
      }
    }
    chosen.blocks_per_sm = resident(chosen);
    *out = chosen;
    return true;
  };
  TcPlan single;
  if (!plan_for(1, &single)) return false;
  // Two tiles a block: 512 value columns (where a tile's registers allow one block of 4 warps
  // fewer than the multiprocessor's share), tiles that pair within their row region; automatic:
  // where the pair keeps as many warps on a multiprocessor (unknown multiprocessor: one tile).
  TcPlan pair;
  const bool pairable = p.dv_tile == 512 && p.tiles_per_group % 2 == 0 && a.tiles_per_block != 1;
  if (pairable && plan_for(2, &pair)) {
    if (a.tiles_per_block == 2 || (pair.blocks_per_sm > 0 && 2 * pair.blocks_per_sm >= single.blocks_per_sm)) {
      *pl = pair;
      return true;
    }
  }
  *pl = single;
  return true;
}

bool PlanWgmmaAttention(const AttentionArgs& a, WgPlan* pl) {
  if (a.kernel != AttentionKernel::kWgmma || a.compute_capability != 90) return false;
  const KvRowRef& r = a.kv.row;
  const bool bf16 = r.type == kElemBf16 && a.kv.type == kElemBf16, codes = r.type == kElemFp8E4M3 && a.kv.type == kElemFp8E4M3;
  if (r.nseg != 0 || (!bf16 && !codes)) return false;
  // MLA's shape: every head reads the one latent row, which is both the keys' first columns and
  // the values (512 of them), the rope key (up to 64 columns) elsewhere in the row.
  const int64_t q2_len = a.q2 != nullptr ? a.q2_len : 0;
  if (a.k_head_step != 0 || a.v_head_step != 0 || a.v_off != a.k1_off || a.dv != 512 || a.q1_len != 512 ||
      q2_len < 0 || q2_len > 64 || a.heads <= 0) {
    return false;
  }
  // Pieces of 8 values (16 bytes of BF16, 8 of codes): column offsets, the rope's length and
  // rows (of the cache, and the phase policy's BF16 fresh rows) in whole pieces.
  const auto whole = [](int64_t x) { return x % 8 == 0; };
  if (!whole(a.k1_off) || !whole(q2_len) || (q2_len > 0 && !whole(a.k2_off)) || a.kv.row_bytes % 16 != 0 ||
      !whole(a.kv.width)) {
    return false;
  }
  // Outputs stored in float pairs: 8-byte aligned rows.
  const auto pairs = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; };
  if (a.out_ld % 2 != 0 || !pairs(a.out) || (a.partial != nullptr && !pairs(a.partial))) return false;
  // Codes are staged in 16-byte copies of the keys' columns alone (not the rest of the row, such
  // as GLM-5's index key): those columns in whole 16-code pieces.
  if (codes && (a.k1_off % 16 != 0 || q2_len % 16 != 0 || (q2_len > 0 && a.k2_off % 16 != 0))) return false;
  WgPlan p;
  p.head_blocks = static_cast<int32_t>((a.heads + wg::kHeads - 1) / wg::kHeads);
  p.kblocks = 8 + (q2_len > 0 ? 1 : 0);
  p.codes = codes ? 1 : 0;
  p.ss = codes ? static_cast<int32_t>(a.q1_len + q2_len) : 0;
  p.off_k = p.kblocks * wg::kBlockBytes;
  p.off_p = p.off_k + (codes ? 1 : 2) * p.kblocks * wg::kBlockBytes;
  p.off_s = p.off_p + wg::kBlockBytes;
  p.off_r = p.off_s + 2 * wg::kChunk * p.ss;
  p.off_f = p.off_r + 2 * wg::kMetaBytes + (codes ? 2 * wg::kScaleBytes : 0);
  p.bytes = p.off_f + 2 * 2 * wg::kHeads * 4;  // red_max, red_sum: [2 warpgroups][64 heads] each
  // Kimi K2's rows take all but 512 bytes of the 227 KiB Hopper allows a block (BF16 rows) and
  // all of it (FP8: the rows' scales).
  if (a.max_shared_bytes < p.bytes) return false;
  *pl = p;
  return true;
}

}  // namespace llmrt::cuda
