// Device access to the paged KV cache shared by the attention kernels: rows by page and slot, a
// layer's FP8 scale, values decoded as the codecs' DecodeRow gives them, and where a token finds
// each position of its context (a cache row, or under the phase policy its pass's BF16 fresh row).
#ifndef LLMRT_KERNELS_KV_ACCESS_CUH_
#define LLMRT_KERNELS_KV_ACCESS_CUH_

#include <climits>
#include <cstdint>

#include "kernels/common.cuh"

namespace llmrt::cuda {

__device__ __forceinline__ const uint8_t* RowAt(const KvRef& kv, int64_t page, int64_t layer, int64_t row) {
  return kv.pages + ((page * kv.num_layers + layer) * kv.page_size + row) * kv.row_bytes;
}

__device__ __forceinline__ bool SlotOk(const KvRef& kv, int32_t slot) {
  return slot >= 0 && slot / kv.page_size < kv.num_pages;
}

__device__ __forceinline__ uint8_t* SlotRow(const KvRef& kv, int64_t layer, int32_t slot) {
  return const_cast<uint8_t*>(RowAt(kv, slot / kv.page_size, layer, slot % kv.page_size));
}

__device__ __forceinline__ float LayerScale(const KvRef& kv, int64_t layer) {
  return kv.layer_scales != nullptr ? kv.layer_scales[layer] : 1.0f;
}

// Value i of a row of layout r, as the codec's DecodeRow gives it (one float32 product of an FP8
// code and its scale).
__device__ __forceinline__ float KvValue(const KvRowRef& r, const uint8_t* row, int64_t i, float layer_scale) {
  if (r.nseg == 0) {
    if (r.type == kElemFp8E4M3) return Fp8ToFloat(row[i]) * layer_scale;
    return LoadElem(row, r.type, i);
  }
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& g = r.seg[k];
    if (i < g.start || i >= g.start + g.count) continue;
    const int64_t j = i - g.start;
    if (g.bf16) return Bf16Bits(reinterpret_cast<const uint16_t*>(row + g.byte_offset)[j]);
    const float scale = reinterpret_cast<const float*>(row + r.scale_offset)[g.first_scale + j / g.tile];
    return Fp8ToFloat(row[g.byte_offset + j]) * scale;
  }
  return 0.0f;  // past the segments (not reached: they cover the width)
}

// Where value i of a row of layout r lies, found once for a column that many rows are read at:
// KvColumnValue<kind> then decodes it from a row with a load or two and no search of the segments
// (the same value, bit for bit, as KvValue).
struct KvColumn {
  int32_t kind;        // 0: past the row (0.0f); 1: F32; 2: BF16; 3: FP8, the layer scale; 4: FP8, a tile scale
  int64_t byte;        // the value's byte offset in the row
  int64_t scale_byte;  // kind 4: its tile scale's byte offset in the row
};
__device__ __forceinline__ KvColumn KvColumnOf(const KvRowRef& r, int64_t i) {
  if (r.nseg == 0) {
    if (r.type == kElemFp8E4M3) return KvColumn{3, i, 0};
    if (r.type == kElemBf16) return KvColumn{2, 2 * i, 0};
    return KvColumn{1, 4 * i, 0};
  }
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& g = r.seg[k];
    if (i < g.start || i >= g.start + g.count) continue;
    const int64_t j = i - g.start;
    if (g.bf16) return KvColumn{2, g.byte_offset + 2 * j, 0};
    return KvColumn{4, g.byte_offset + j, r.scale_offset + 4 * (g.first_scale + j / g.tile)};
  }
  return KvColumn{0, 0, 0};
}
// The value of a column of kind kKind (col.kind, known to the caller) in a cache row.
template <int kKind>
__device__ __forceinline__ float KvColumnValue(const KvColumn& col, const uint8_t* row, float layer_scale) {
  if constexpr (kKind == 1) return *reinterpret_cast<const float*>(row + col.byte);
  if constexpr (kKind == 2) return Bf16Bits(*reinterpret_cast<const uint16_t*>(row + col.byte));
  if constexpr (kKind == 3) return Fp8ToFloat(row[col.byte]) * layer_scale;
  if constexpr (kKind == 4) return Fp8ToFloat(row[col.byte]) * *reinterpret_cast<const float*>(row + col.scale_byte);
  return 0.0f;
}

// A row attention reads: a cache row, or under the phase policy a BF16 fresh row.
struct RowPtr {
  const uint8_t* data;
  bool fresh;
};

__device__ __forceinline__ float RowValue(const KvRef& kv, const RowPtr& r, int64_t i, float layer_scale) {
  if (r.fresh) return Bf16Bits(reinterpret_cast<const uint16_t*>(r.data)[i]);
  return KvValue(kv.row, r.data, i, layer_scale);
}

// Where token t reads the positions of its sequence: pages, and (fresh rows) the first position
// this pass wrote for the sequence and its fresh row.
struct Context {
  const int32_t* pages;
  int64_t num_pages;  // the sequence's
  int64_t ctx;
  int64_t fresh_from = INT64_MAX;
  int64_t fresh_row = 0;
};

__device__ __forceinline__ Context ContextOf(const KvRef& kv, const BatchRef& b, int64_t t) {
  Context c;
  const int32_t seq = b.token_seq[t];
  c.pages = b.page_ids + b.seq_page_start[seq];
  c.num_pages = b.seq_page_start[seq + 1] - b.seq_page_start[seq];
  c.ctx = b.token_ctx[t];
  if (kv.fresh != nullptr) {
    const int32_t first = b.seq_first_token[seq];
    c.fresh_row = first;
    c.fresh_from = b.token_ctx[first] - 1;
  }
  return c;
}

// Position p of the context, or false when p or its page is out of range.
__device__ __forceinline__ bool Locate(const KvRef& kv, int64_t layer, const Context& c, int64_t p, RowPtr* r) {
  if (p < 0 || p >= c.ctx) return false;
  if (p >= c.fresh_from) {
    const int64_t fr = c.fresh_row + (p - c.fresh_from);
    if (fr >= kv.fresh_rows) return false;
    *r = {reinterpret_cast<const uint8_t*>(kv.fresh + fr * kv.width), true};
    return true;
  }
  // The page and row of p: a 32-bit division where both fit (every real context; a 64-bit one is
  // a call of several tens of instructions).
  int64_t pi, row;
  if (p <= INT32_MAX && kv.page_size <= INT32_MAX) {
    const uint32_t p32 = static_cast<uint32_t>(p), ps = static_cast<uint32_t>(kv.page_size);
    pi = p32 / ps;
    row = p32 - static_cast<uint32_t>(pi) * ps;
  } else {
    pi = p / kv.page_size;
    row = p % kv.page_size;
  }
  if (pi >= c.num_pages) return false;  // past the sequence's pages
  const int32_t page = c.pages[pi];
  if (page < 0 || page >= kv.num_pages) return false;
  *r = {RowAt(kv, page, layer, row), false};
  return true;
}

// The grid's i-th token (AttentionArgs::listed_runs). The runs are read at constant indices (a
// kernel parameter indexed at run time would be copied to local memory).
__device__ __forceinline__ int ListedToken(const AttentionArgs& a, int i) {
  if (a.listed_runs <= 0) return i;
  int first = a.listed_first[0], at = a.listed_at[0];
#pragma unroll
  for (int r = 1; r < AttentionArgs::kMaxListedRuns; ++r) {
    if (r < a.listed_runs && a.listed_at[r] <= i) {
      first = a.listed_first[r];
      at = a.listed_at[r];
    }
  }
  return first + i - at;
}

// Where an attention block writes head h's output for token t, the grid's i-th (ListedToken):
// with splits, its split's partial row (max m and sum l first, written by the `lead` thread; the
// values unnormalized: *mul = 1), else the output row (*mul = 1 / l, or 0 where no position was
// attended: zeros, as the CPU).
__device__ __forceinline__ float* AttentionOutputRow(const AttentionArgs& a, int64_t t, int64_t i, int64_t h,
                                                     int split, float m, float l, bool lead, float* mul) {
  if (a.splits > 1) {
    float* part = a.partial + ((i * a.heads + h) * a.splits + split) * (a.dv + 2);
    if (lead) {
      part[0] = m;
      part[1] = l;
    }
    *mul = 1.0f;
    return part + 2;
  }
  *mul = l > 0.0f ? 1.0f / l : 0.0f;
  return a.out + t * a.out_ld + h * a.dv;
}

// The number of a token's selected positions (its list of top_k ends at the first -1), found by
// the whole block: each thread looks at a strided share for a -1 and the first is kept by an
// atomic minimum in `slot` (a shared int, free again on return): a few independent loads a
// thread, where each thread scanning the list itself took up to top_k dependent loads.
__device__ __forceinline__ int64_t SelectedCount(const int32_t* sel, int64_t top_k, int* slot) {
  if (threadIdx.x == 0) *slot = static_cast<int>(top_k);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) {
    if (sel[i] == -1) {
      atomicMin(slot, static_cast<int>(i));
      break;
    }
  }
  __syncthreads();
  const int64_t n = *slot;
  __syncthreads();
  return n;
}

// Whether attention leaves token t to another kernel (AttentionArgs::skip_seq_tokens): its
// sequence brings at least that many tokens to the pass (a sequence's rows are contiguous).
// A listed grid (AttentionArgs::listed_runs) holds none of them.
__device__ __forceinline__ bool SkipsToken(const AttentionArgs& a, int64_t t) {
  if (a.skip_seq_tokens <= 0 || a.listed_runs > 0) return false;
  const BatchRef& b = a.batch;
  const int64_t s = b.token_seq[t];
  const int64_t end = s + 1 < a.num_seqs ? b.seq_first_token[s + 1] : b.num_tokens;
  return end - b.seq_first_token[s] >= a.skip_seq_tokens;
}

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_KV_ACCESS_CUH_
