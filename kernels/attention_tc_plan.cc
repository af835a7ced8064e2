// Which calls the tensor-core attention kernel takes, and its shared memory layout.
#include <cstdint>

#include "kernels/attention_tc.h"

namespace llmrt::cuda {
namespace {

int32_t Round16(int64_t n) { return static_cast<int32_t>((n + 15) / 16 * 16); }

}  // namespace

using tc::kChunk;
using tc::kMaxShared;
using tc::kPad;
using tc::kPs;
using tc::kRows;
using tc::kWarps;

bool PlanTensorCoreAttention(const AttentionArgs& a, TcPlan* pl) {
  if (a.kernel == AttentionKernel::kScalar) return false;
  const KvRowRef& r = a.kv.row;
  if (r.nseg != 0 || (r.type != kElemBf16 && r.type != kElemFp8E4M3)) return false;
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
  p.fp8 = r.type == kElemFp8E4M3 ? 1 : 0;
  p.off_k = p.terms * kRows * p.ks * 2;
  p.off_v = p.off_k + kChunk * p.ks * 2;
  p.off_p = p.off_v + kChunk * p.vs * 2;
  p.off_f = p.off_p + p.terms * kRows * kPs * 2;
  p.bytes = p.off_f + kChunk * 4 + kChunk * 4 + 2 * kWarps * kRows * 4 + 256 * 2;
  if (p.bytes > kMaxShared) return false;
  *pl = p;
  return true;
}

}  // namespace llmrt::cuda
