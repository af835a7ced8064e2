// The KV cache and attention kernels' bodies (kernels/attention.cu describes them and launches
// them), in a header of their own so that they compile
// twice: for the device, and on the host in tests/cuda_emulation/ (see attention_tc_kernel.cuh).
#ifndef LLMRT_KERNELS_KV_KERNELS_CUH_
#define LLMRT_KERNELS_KV_KERNELS_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"
#include "kernels/select.cuh"

namespace llmrt::cuda::kvk {

// Encodes `vals` (r.width floats in shared memory) into `row` by layout r: flat rows value by
// value (FP8: e4m3(x * (1 / layer_scale))), tiled rows per segment (BF16 values, or FP8 tiles
// with scale = largest magnitude / 448, 1 for an all-zero tile, codes e4m3(x * (1 / scale))):
// the CPU codecs' EncodeRow, operation for operation. The whole block calls it.
__device__ inline void EncodeRow(const KvRowRef& r, float layer_scale, const float* vals, uint8_t* row) {
  if (r.nseg == 0) {
    if (r.type == kElemFp8E4M3) {
      const float inv = 1.0f / layer_scale;
      for (int64_t i = threadIdx.x; i < r.width; i += blockDim.x) row[i] = FloatToFp8(vals[i] * inv);
    } else {
      for (int64_t i = threadIdx.x; i < r.width; i += blockDim.x) StoreElem(row, r.type, i, vals[i]);
    }
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* scales = reinterpret_cast<float*>(row + r.scale_offset);
  for (int k = 0; k < r.nseg; ++k) {
    const KvSegRef& g = r.seg[k];
    if (g.bf16) {
      uint16_t* dst = reinterpret_cast<uint16_t*>(row + g.byte_offset);
      for (int64_t i = threadIdx.x; i < g.count; i += blockDim.x) dst[i] = ToBf16Bits(vals[g.start + i]);
      continue;
    }
    // One warp per tile.
    const int64_t tiles = (g.count + g.tile - 1) / g.tile;
    for (int64_t tile = warp; tile < tiles; tile += warps) {
      const int64_t t0 = tile * g.tile, n = g.count - t0 < g.tile ? g.count - t0 : g.tile;
      float amax = 0.0f;
      for (int64_t i = lane; i < n; i += 32) amax = fmaxf(amax, fabsf(vals[g.start + t0 + i]));
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      if (lane == 0) scales[g.first_scale + tile] = scale;
      const float inv = 1.0f / scale;
      for (int64_t i = lane; i < n; i += 32) row[g.byte_offset + t0 + i] = FloatToFp8(vals[g.start + t0 + i] * inv);
    }
  }
}

// One block per token: the parts side by side from column 0 (zeros after them) in shared memory,
// the BF16 fresh row when there are fresh rows, then the row encoded by the cache's codec.
__global__ void KvWriteKernel(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err) {
  float* vals = DynamicShared<float>();
  const int64_t t = blockIdx.x;
  int64_t width = 0;
  for (int p = 0; p < parts.count; ++p) {
    const ConstMat& m = parts.part[p];
    for (int64_t i = threadIdx.x; i < m.cols; i += blockDim.x) vals[width + i] = m.data[t * m.ld + i];
    width += m.cols;
  }
  for (int64_t i = width + threadIdx.x; i < kv.width; i += blockDim.x) vals[i] = 0.0f;
  __syncthreads();
  if (kv.fresh != nullptr && t < kv.fresh_rows) {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) kv.fresh[t * kv.width + i] = ToBf16Bits(vals[i]);
  }
  const int32_t slot = batch.slot_mapping[t];
  if (!SlotOk(kv, slot)) {
    if (threadIdx.x == 0) RaiseError(err, kErrSlot);
    return;
  }
  EncodeRow(kv.row, LayerScale(kv, layer), vals, SlotRow(kv, layer, slot));
}

constexpr int kCalibrateThreads = 1024;

// One block: the largest magnitude of every part's values, then the layer's calibrated scale.
__global__ void __launch_bounds__(kCalibrateThreads) KvCalibrateKernel(KvRef kv, int64_t layer, KvParts parts) {
  __shared__ float shared[32];
  float amax = 0.0f;
  for (int p = 0; p < parts.count; ++p) {
    const ConstMat& m = parts.part[p];
    for (int64_t e = threadIdx.x; e < m.rows * m.cols; e += blockDim.x) {
      amax = fmaxf(amax, fabsf(m.data[(e / m.cols) * m.ld + e % m.cols]));
    }
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) amax = fmaxf(amax, shared[w]);
  // Fp8Codec::CalibratedScale: 2x headroom over the largest magnitude.
  const_cast<float*>(kv.layer_scales)[layer] = amax > 0.0f ? amax * 2.0f / 448.0f : 1.0f;
}

__global__ void KvExportKernel(KvRef kv, int64_t layer, const int32_t* slots, uint8_t* dst, int32_t* err) {
  const int64_t i = blockIdx.x;
  const int32_t slot = slots[i];
  if (!SlotOk(kv, slot)) {
    RaiseError(err, kErrSlot);
    return;
  }
  const uint8_t* row = SlotRow(kv, layer, slot);
  for (int64_t b = threadIdx.x; b < kv.row_bytes; b += blockDim.x) dst[i * kv.row_bytes + b] = row[b];
}

// One block per row: the bytes as they are for the cache's own codec at its scale, else decoded
// by the source layout into shared memory and encoded by the cache's.
__global__ void KvImportKernel(KvRef kv, int64_t layer, const int32_t* slots, const uint8_t* src, KvRowRef src_row,
                               float src_scale, bool same_codec, int32_t* err) {
  float* vals = DynamicShared<float>();
  const int64_t i = blockIdx.x;
  const int32_t slot = slots[i];
  if (!SlotOk(kv, slot)) {
    if (threadIdx.x == 0) RaiseError(err, kErrSlot);
    return;
  }
  uint8_t* row = SlotRow(kv, layer, slot);
  const uint8_t* in = src + i * src_row.row_bytes;
  const float scale = LayerScale(kv, layer);
  if (same_codec && (kv.layer_scales == nullptr || scale == src_scale)) {
    for (int64_t b = threadIdx.x; b < kv.row_bytes; b += blockDim.x) row[b] = in[b];
    return;
  }
  for (int64_t v = threadIdx.x; v < kv.width; v += blockDim.x) vals[v] = KvValue(src_row, in, v, src_scale);
  __syncthreads();
  EncodeRow(kv.row, scale, vals, row);
}

constexpr int kAttnThreads = 128, kChunk = 32;
static_assert(kAttnThreads >= kChunk, "a thread per position of a chunk sets its probability");

// Dynamic shared memory: q [q1_len + q2_len], acc [dv], scores [kChunk]. blockIdx.x is the
// grid's (token, head) (the token ListedToken's), blockIdx.y the split of its positions.
__global__ void ScalarAttentionKernel(AttentionArgs a, int32_t* err) {
  float* smem = DynamicShared<float>();
  const int64_t t = ListedToken(a, static_cast<int>(blockIdx.x / a.heads)), h = blockIdx.x % a.heads, g = h / a.kv_group;
  const int64_t split = blockIdx.y;
  if (SkipsToken(a, t)) return;  // another kernel's token
  const int64_t qlen = a.q1_len + a.q2_len;
  float* q = smem;
  float* acc = q + qlen;
  float* sc = acc + a.dv;
  const float* q1 = a.q1 + t * a.q1_ld + h * a.q1_head;
  for (int64_t i = threadIdx.x; i < a.q1_len; i += blockDim.x) q[i] = q1[i];
  if (a.q2 != nullptr) {
    const float* q2 = a.q2 + t * a.q2_ld + h * a.q2_head;
    for (int64_t i = threadIdx.x; i < a.q2_len; i += blockDim.x) q[a.q1_len + i] = q2[i];
  }
  for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) acc[j] = 0.0f;
  __syncthreads();

  const BatchRef& b = a.batch;
  const Context cx = ContextOf(a.kv, b, t);
  const int64_t ctx = cx.ctx;
  const float layer_scale = LayerScale(a.kv, a.layer);
  const int32_t* sel = a.selected != nullptr ? a.selected + t * a.top_k : nullptr;
  __shared__ int first_unselected;
  const int64_t n = sel != nullptr ? SelectedCount(sel, a.top_k, &first_unselected) : ctx;
  const int64_t k1 = a.k1_off + g * a.k_head_step, v_off = a.v_off + g * a.v_head_step;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // This split's positions [begin, end): equal shares in whole chunks.
  const int64_t share = ((n + a.splits - 1) / a.splits + kChunk - 1) / kChunk * kChunk;
  const int64_t begin = split * share, end = begin + share < n ? begin + share : n;
  // Per chunk, shared: each position's row (found once, by the warp that scores it) and its
  // probability under the running maximum (one expf per position, not one per output column).
  __shared__ RowPtr rows[kChunk];
  __shared__ bool found[kChunk];
  __shared__ float prob[kChunk];
  float m = -INFINITY, l = 0.0f;
  bool bad = false;  // uniform over the block: every thread checks the same positions
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int cn = static_cast<int>(end - c0 < kChunk ? end - c0 : kChunk);
    // Scores: one warp per position.
    for (int i = warp; i < cn; i += warps) {
      const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
      float s = -INFINITY;
      RowPtr row{nullptr, false};
      const bool ok = Locate(a.kv, a.layer, cx, p, &row);
      if (ok) {
        float d = 0.0f;
        for (int64_t i1 = lane; i1 < a.q1_len; i1 += 32) d = fmaf(q[i1], RowValue(a.kv, row, k1 + i1, layer_scale), d);
        for (int64_t i2 = lane; i2 < a.q2_len; i2 += 32) {
          d = fmaf(q[a.q1_len + i2], RowValue(a.kv, row, a.k2_off + i2, layer_scale), d);
        }
        s = WarpSum(d) * a.scale;
      }
      if (lane == 0) {
        sc[i] = s;
        rows[i] = row;
        found[i] = ok;
      }
    }
    __syncthreads();
    float cmax = -INFINITY;
    for (int i = 0; i < cn; ++i) {
      if (!found[i]) bad = true;
      cmax = fmaxf(cmax, sc[i]);
    }
    const float new_m = fmaxf(m, cmax);
    const float factor = m == -INFINITY ? 0.0f : expf(m - new_m);
    if (threadIdx.x < cn) prob[threadIdx.x] = sc[threadIdx.x] == -INFINITY ? 0.0f : expf(sc[threadIdx.x] - new_m);
    __syncthreads();
    float psum = 0.0f;
    for (int i = 0; i < cn; ++i) psum += prob[i];
    l = l * factor + psum;
    for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) {
      float o = acc[j] * factor;
      for (int i = 0; i < cn; ++i) {
        if (sc[i] == -INFINITY) continue;  // (its row is valid otherwise)
        o = fmaf(prob[i], RowValue(a.kv, rows[i], v_off + j, layer_scale), o);
      }
      acc[j] = o;
    }
    m = new_m;
    __syncthreads();  // sc, rows and prob are rewritten by the next chunk
  }
  if (bad && threadIdx.x == 0) RaiseError(err, sel != nullptr ? kErrSelected : kErrPage);
  if (a.splits > 1) {
    float* part = a.partial + (static_cast<int64_t>(blockIdx.x) * a.splits + split) * (a.dv + 2);
    if (threadIdx.x == 0) {
      part[0] = m;
      part[1] = l;
    }
    for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) part[2 + j] = acc[j];
    return;
  }
  float* out = a.out + t * a.out_ld + h * a.dv;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no position: zeros, as the CPU
  for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) out[j] = acc[j] * inv;
}

// The splits of one (token, head): rescaled to their common maximum and normalized by the
// rescaled sum. Splits without positions (l == 0) contribute nothing.
__global__ void AttentionCombineKernel(AttentionArgs a) {
  const int64_t t = ListedToken(a, static_cast<int>(blockIdx.x / a.heads)), h = blockIdx.x % a.heads;
  if (SkipsToken(a, t)) return;  // another kernel's token: no partial results
  const float* parts = a.partial + static_cast<int64_t>(blockIdx.x) * a.splits * (a.dv + 2);
  float mx = -INFINITY;
  for (int64_t s = 0; s < a.splits; ++s) {
    const float* p = parts + s * (a.dv + 2);
    if (p[1] > 0.0f) mx = fmaxf(mx, p[0]);
  }
  float denom = 0.0f;
  for (int64_t s = 0; s < a.splits; ++s) {
    const float* p = parts + s * (a.dv + 2);
    if (p[1] > 0.0f) denom += p[1] * expf(p[0] - mx);
  }
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  float* out = a.out + t * a.out_ld + h * a.dv;
  for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < a.splits; ++s) {
      const float* p = parts + s * (a.dv + 2);
      if (p[1] > 0.0f) o = fmaf(p[2 + j], expf(p[0] - mx), o);
    }
    out[j] = o * inv;
  }
}

// I(t, p) = sum_h w[t,h] * relu(q[t,h] . k_p * key_scale), one thread per (token, position), for
// tokens whose context exceeds top_k: per head one sequential fmaf chain over the columns, times
// key_scale, then `if (dot > 0) s += w * dot` with the product and the sum each rounded (nvcc
// would fuse them), heads in order; every score kernel gives these bits. (The CPU backend's dot
// products sum on SIMD lanes, in an order that depends on the vector width, so its scores agree
// within float32's bound, not bit for bit.) The score kernels' grids are (tokens,
// blocks of positions): a pass may hold more than 65,535 tokens (grid.y's limit), and a token's
// context at most 65,535 blocks of positions (8.4M positions at the smallest block, 128), which
// the launcher checks.
__global__ void DsaScoreKernel(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef b, int64_t heads,
                               int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                               int32_t* err) {
  const int64_t t = blockIdx.x, p = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t ctx = b.token_ctx[t];
  if (ctx <= top_k || p >= ctx || p >= b.max_ctx) return;
  const Context cx = ContextOf(kv, b, t);
  RowPtr row;
  if (!Locate(kv, layer, cx, p, &row)) {
    RaiseError(err, kErrPage);
    scores[t * b.max_ctx + p] = 0.0f;
    return;
  }
  const float layer_scale = LayerScale(kv, layer);
  const float* qt = q.data + t * q.ld;
  const float* wt = w.data + t * w.ld;
  float s = 0.0f;
  for (int64_t h = 0; h < heads; ++h) {
    float d = 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) {
      d = fmaf(qt[h * head_dim + i], RowValue(kv, row, key_offset + i, layer_scale), d);
    }
    const float dot = d * key_scale;
    if (dot > 0.0f) s = __fadd_rn(s, __fmul_rn(wt[h], dot));  // unfused, as the CPU rounds them
  }
  scores[t * b.max_ctx + p] = s == 0.0f ? 0.0f : s;  // -0 and +0 are one score (ties by position)
}

// The same scores, each block's kDsaPositions rows staged in shared memory: the block's threads
// find one row each, its warps decode the rows' keys (a row over the lanes, coalesced) into a
// float tile, and the query and weights go to shared memory once; then each thread runs its
// position's fmaf chains from there (four columns a load where head_dim is a multiple of 4).
// The same float operations in the same order as DsaScoreKernel, so the same bits; what changes
// is that each key value is decoded once instead of once per head, and the loads are shared.
// Shared memory: DsaStagedBytes(heads, head_dim).
inline constexpr int kDsaPositions = 128;  // threads and positions per block
__host__ __device__ inline int64_t DsaRound4(int64_t n) { return (n + 3) / 4 * 4; }
// A staged key row's stride in floats: whole float4s, and 4 banks apart from the next row (the
// threads of a quarter warp read 8 rows' float4s at one column: no conflict).
__host__ __device__ inline int64_t DsaKeyStride(int64_t head_dim) { return DsaRound4(head_dim) + 4; }
__host__ __device__ inline int64_t DsaStagedBytes(int64_t heads, int64_t head_dim) {
  return (DsaRound4(heads * head_dim) + DsaRound4(heads) + kDsaPositions * DsaKeyStride(head_dim)) * 4 +
         kDsaPositions * 16;
}

__global__ void __launch_bounds__(kDsaPositions) DsaScoreStagedKernel(ConstMat q, ConstMat w, KvRef kv, int64_t layer,
                                                                       BatchRef b, int64_t heads, int64_t head_dim,
                                                                       int64_t key_offset, float key_scale,
                                                                       int64_t top_k, float* scores, int32_t* err) {
  const int64_t t = blockIdx.x, p0 = blockIdx.y * static_cast<int64_t>(kDsaPositions);
  const int64_t ctx = b.token_ctx[t];
  if (ctx <= top_k || p0 >= ctx || p0 >= b.max_ctx) return;  // uniform over the block
  // This block's positions (a context past the scores' bound is scored up to the bound: the
  // top-k reports it).
  const int64_t end = ctx < b.max_ctx ? ctx : b.max_ctx;
  const int64_t n = end - p0 < kDsaPositions ? end - p0 : kDsaPositions;
  const int64_t ks = DsaKeyStride(head_dim);
  float* qs = DynamicShared<float>();                        // [heads * head_dim]
  float* ws = qs + DsaRound4(heads * head_dim);               // [heads]
  float* kt = ws + DsaRound4(heads);                          // [kDsaPositions][ks], 16-byte aligned
  const uint8_t** rows = reinterpret_cast<const uint8_t**>(kt + kDsaPositions * ks);  // [kDsaPositions]
  int* fresh = reinterpret_cast<int*>(rows + kDsaPositions);  // [kDsaPositions]
  const int x = threadIdx.x, lane = x & 31, warp = x >> 5;
  const float* qt = q.data + t * q.ld;
  const float* wt = w.data + t * w.ld;
  for (int64_t i = x; i < heads * head_dim; i += kDsaPositions) qs[i] = qt[i];
  for (int64_t i = x; i < heads; i += kDsaPositions) ws[i] = wt[i];
  const Context cx = ContextOf(kv, b, t);
  bool ok = false;
  if (x < n) {
    RowPtr row{nullptr, false};
    ok = Locate(kv, layer, cx, p0 + x, &row);
    if (!ok) RaiseError(err, kErrPage);
    rows[x] = ok ? row.data : nullptr;
    fresh[x] = ok && row.fresh ? 1 : 0;
  }
  __syncthreads();
  const float layer_scale = LayerScale(kv, layer);
  for (int64_t r = warp; r < n; r += kDsaPositions / 32) {
    const RowPtr row{rows[r], fresh[r] != 0};
    for (int64_t i = lane; i < head_dim; i += 32) {
      kt[r * ks + i] = row.data != nullptr ? RowValue(kv, row, key_offset + i, layer_scale) : 0.0f;
    }
  }
  __syncthreads();
  if (x >= n) return;
  if (!ok) {
    scores[t * b.max_ctx + p0 + x] = 0.0f;
    return;
  }
  const float* k = kt + x * ks;
  float s = 0.0f;
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = qs + h * head_dim;
    float d = 0.0f;
    int64_t i = 0;
    if ((head_dim & 3) == 0) {
      for (; i < head_dim; i += 4) {
        const float4 qv = *reinterpret_cast<const float4*>(qh + i), kv4 = *reinterpret_cast<const float4*>(k + i);
        d = fmaf(qv.x, kv4.x, d);
        d = fmaf(qv.y, kv4.y, d);
        d = fmaf(qv.z, kv4.z, d);
        d = fmaf(qv.w, kv4.w, d);
      }
    }
    for (; i < head_dim; ++i) d = fmaf(qh[i], k[i], d);
    const float dot = d * key_scale;
    if (dot > 0.0f) s = __fadd_rn(s, __fmul_rn(ws[h], dot));  // unfused, as the CPU rounds them
  }
  scores[t * b.max_ctx + p0 + x] = s == 0.0f ? 0.0f : s;  // -0 and +0 are one score (ties by position)
}

// The same scores again, tiled in registers. DsaScoreStagedKernel loads a query float4 and a key
// float4 from shared memory for every four multiply-adds: shared memory's bandwidth, not the
// float32 units, bounds it (by count about a fifth of the FMA rate). Here a thread keeps
// kDsaTileAcc accumulators, kHeads heads x DsaTilePerThread(kHeads) positions: per four columns it
// loads its positions' key float4s once and each head's query float4 once (the same address in
// every lane: a broadcast), for 4 x kDsaTileAcc multiply-adds. The head dimension goes through
// shared memory kDsaTileChunk columns at a time (the queries of every head, the block's key rows),
// so each head's chain still runs over the columns in order: the same fmaf chains, the same sum
// over heads in order, the same bits as DsaScoreKernel. Columns past head_dim are staged as 0 in
// both the query and the key: fmaf(0, 0, d) is d, except that a -0 (a product that underflows)
// becomes +0, and a dot of either zero adds nothing (relu); heads past `heads` take a query of 0
// and their sums are dropped.
// kPer (positions a thread) is kDsaTileAcc / kHeads, or 1 for a pass of few blocks (decode over
// a context of a few tiles: one position a thread gives the device 2 or 4 times the blocks).
// Shared memory: DsaTiledBytes(kHeads, kPer).
inline constexpr int kDsaTileThreads = 128;
inline constexpr int kDsaTileAcc = 64;                      // accumulators a thread, at most
inline constexpr int kDsaTileChunk = 32;                    // columns staged at a time
inline constexpr int kDsaTileStride = kDsaTileChunk + 4;    // floats a staged key row: 4 banks apart
__host__ __device__ constexpr int DsaTilePerThread(int heads_tile) { return kDsaTileAcc / heads_tile; }
__host__ __device__ constexpr int DsaTilePositions(int heads_tile, int per = 0) {
  return kDsaTileThreads * (per > 0 ? per : DsaTilePerThread(heads_tile));
}
__host__ __device__ constexpr int64_t DsaTiledBytes(int heads_tile, int per = 0) {
  return (int64_t{heads_tile} * kDsaTileChunk + int64_t{DsaTilePositions(heads_tile, per)} * kDsaTileStride) * 4 +
         int64_t{DsaTilePositions(heads_tile, per)} * static_cast<int64_t>(sizeof(void*) + sizeof(int));
}
// A pass with fewer blocks of the usual tiles than this takes one position a thread.
inline constexpr int64_t kDsaFewBlocks = 512;
// The tile of heads that takes `heads` (16, 32 or 64), or 0 past 64 (the staged kernel runs).
__host__ __device__ constexpr int DsaTileHeads(int64_t heads) {
  return heads < 1 ? 0 : heads <= 16 ? 16 : heads <= 32 ? 32 : heads <= 64 ? 64 : 0;
}

template <int kHeads, int kPer = DsaTilePerThread(kHeads)>
__global__ void __launch_bounds__(kDsaTileThreads, 3)
    DsaScoreTiledKernel(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef b, int64_t heads, int64_t head_dim,
                        int64_t key_offset, float key_scale, int64_t top_k, float* scores, int32_t* err) {
  constexpr int kBlock = DsaTilePositions(kHeads, kPer), kWarps = kDsaTileThreads / 32;
  constexpr int kBatch = 16;  // rows a warp loads before storing them (loads in flight)
  static_assert(kPer >= 1 && kPer * kHeads <= kDsaTileAcc && (kBlock / kWarps) % kBatch == 0, "tile shape");
  const int64_t t = blockIdx.x, p0 = blockIdx.y * static_cast<int64_t>(kBlock);
  const int64_t ctx = b.token_ctx[t];
  if (ctx <= top_k || p0 >= ctx || p0 >= b.max_ctx) return;  // uniform over the block
  const int64_t end = ctx < b.max_ctx ? ctx : b.max_ctx;     // (as DsaScoreStagedKernel)
  const int64_t n = end - p0 < kBlock ? end - p0 : kBlock;   // this block's positions
  float* qs = DynamicShared<float>();                         // [kHeads][kDsaTileChunk]
  float* kt = qs + kHeads * kDsaTileChunk;                    // [kBlock][kDsaTileStride], 16-byte aligned
  const uint8_t** rows = reinterpret_cast<const uint8_t**>(kt + kBlock * kDsaTileStride);  // [kBlock]
  int* fresh = reinterpret_cast<int*>(rows + kBlock);                                      // [kBlock]
  const int x = threadIdx.x, lane = x & 31, warp = x >> 5;
  const Context cx = ContextOf(kv, b, t);
  for (int r = x; r < kBlock; r += kDsaTileThreads) {
    RowPtr row{nullptr, false};
    if (r < n && !Locate(kv, layer, cx, p0 + r, &row)) {
      RaiseError(err, kErrPage);
      row = RowPtr{nullptr, false};
    }
    rows[r] = row.data;
    fresh[r] = row.fresh ? 1 : 0;
  }
  const float layer_scale = LayerScale(kv, layer);
  const float* qt = q.data + t * q.ld;
  float d[kPer][kHeads];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) d[j][h] = 0.0f;
  }
  for (int64_t c0 = 0; c0 < head_dim; c0 += kDsaTileChunk) {
    __syncthreads();  // the rows are found (first chunk) or the last chunk is read
    for (int i = x; i < kHeads * kDsaTileChunk; i += kDsaTileThreads) {
      const int h = i / kDsaTileChunk;
      const int64_t c = c0 + i % kDsaTileChunk;
      qs[i] = h < heads && c < head_dim ? qt[h * head_dim + c] : 0.0f;
    }
    const int64_t c = c0 + lane;  // a row over the warp's lanes
    // The lane's column in a cache row, found once for the chunk's rows (fresh rows: BF16 at
    // key_offset + c).
    const KvColumn col = c < head_dim ? KvColumnOf(kv.row, key_offset + c) : KvColumn{0, 0, 0};
    // The rows' values, the column's decoding chosen once (a branch per value would keep the
    // batch's loads from being in flight together).
    const auto stage = [&](auto kind) {
      for (int r0 = warp; r0 < kBlock; r0 += kWarps * kBatch) {
        float v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int r = r0 + u * kWarps;
          const uint8_t* row = rows[r];
          v[u] = row == nullptr ? 0.0f
                 : fresh[r] != 0 ? Bf16Bits(reinterpret_cast<const uint16_t*>(row)[key_offset + c])
                                 : KvColumnValue<decltype(kind)::value>(col, row, layer_scale);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) kt[(r0 + u * kWarps) * kDsaTileStride + lane] = v[u];
      }
    };
    switch (c < head_dim ? col.kind : -1) {
      case 0: stage(std::integral_constant<int, 0>{}); break;  // (past the row's segments: fresh rows only)
      case 1: stage(std::integral_constant<int, 1>{}); break;
      case 2: stage(std::integral_constant<int, 2>{}); break;
      case 3: stage(std::integral_constant<int, 3>{}); break;
      case 4: stage(std::integral_constant<int, 4>{}); break;
      default:  // past the head dimension: zeros
        for (int r = warp; r < kBlock; r += kWarps) kt[r * kDsaTileStride + lane] = 0.0f;
        break;
    }
    __syncthreads();
#pragma unroll 2
    for (int i = 0; i < kDsaTileChunk; i += 4) {
      float4 k4[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        k4[j] = *reinterpret_cast<const float4*>(kt + (x + j * kDsaTileThreads) * kDsaTileStride + i);
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float4 q4 = *reinterpret_cast<const float4*>(qs + h * kDsaTileChunk + i);
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          d[j][h] = fmaf(q4.x, k4[j].x, d[j][h]);
          d[j][h] = fmaf(q4.y, k4[j].y, d[j][h]);
          d[j][h] = fmaf(q4.z, k4[j].z, d[j][h]);
          d[j][h] = fmaf(q4.w, k4[j].w, d[j][h]);
        }
      }
    }
  }
  const float* wt = w.data + t * w.ld;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int r = x + j * kDsaTileThreads;
    if (r >= n) continue;
    float* out = scores + t * b.max_ctx + p0 + r;
    if (rows[r] == nullptr) {  // its page is out of range (raised above)
      *out = 0.0f;
      continue;
    }
    float s = 0.0f;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h >= heads) break;
      const float dot = d[j][h] * key_scale;
      if (dot > 0.0f) s = __fadd_rn(s, __fmul_rn(wt[h], dot));  // unfused, as the CPU rounds them
    }
    *out = s == 0.0f ? 0.0f : s;  // -0 and +0 are one score (ties by position)
  }
}

// ---- the DSA top-k ----

// The top-k's trivial tokens: a context within top_k takes every position (padded with -1); one
// past the scores' bound (max_ctx) raises the page error and selects nothing. True where the
// token is done.
__device__ __forceinline__ bool DsaTopKTrivial(const BatchRef& b, int64_t t, int64_t top_k, int32_t* out,
                                               int32_t* err) {
  const int64_t ctx = b.token_ctx[t];
  if (ctx <= top_k) {  // every position: dense
    for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) out[i] = i < ctx ? static_cast<int32_t>(i) : -1;
    return true;
  }
  if (ctx > b.max_ctx) {  // scores hold max_ctx positions per token
    if (threadIdx.x == 0) RaiseError(err, kErrPage);
    for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) out[i] = -1;
    return true;
  }
  return false;
}

// One block of sel::kSelectThreads per token: the positions of the top_k scores (ties to the
// earlier position) in ascending order, by sel::RadixSelect and sel::TakeSelected.
__global__ void __launch_bounds__(sel::kSelectThreads) DsaTopKKernel(BatchRef b, int64_t top_k, const float* scores,
                                                                     int32_t* selected, int64_t ld, int32_t* err) {
  __shared__ sel::SelectShared sh;
  const int64_t t = blockIdx.x, ctx = b.token_ctx[t];
  int32_t* out = selected + t * ld;
  if (DsaTopKTrivial(b, t, top_k, out, err)) return;
  const float* sc = scores + t * b.max_ctx;
  const auto key_at = [&](int64_t p) { return sel::OrderKey(sc[p]); };
  const sel::Threshold th = sel::RadixSelect(ctx, top_k, key_at, sh);
  sel::TakeSelected(ctx, th, key_at, sh, [&](int64_t p, int slot, uint32_t) { out[slot] = static_cast<int32_t>(p); });
}

// The same selection in two stages, for a few tokens over long contexts, where one block per
// token leaves most of the device idle and walks every score on one multiprocessor (GLM-5's
// decode: 128K positions, four passes and two scans over them, in every layer).
//   1. A block per (token, chunk of `chunk` positions) selects its chunk's top_k (a chunk of at
//      most top_k positions: all of it) by the same rule, and writes their order keys and
//      positions, in ascending position order, at the token's candidate slot c * top_k.
//   2. A block per token selects top_k among its candidates (DsaCandidates of them).
// The same positions as DsaTopKKernel: a position among the token's top_k has fewer than top_k
// positions of the token ranked above it, so fewer of its chunk, and is among its chunk's
// candidates; and the candidates ascend by position (chunks in order, each chunk's in order), so
// ranking equal keys by candidate ranks them by position. Chunks other than the last hold
// `chunk` >= top_k positions, each giving top_k candidates, so the candidates are contiguous.
__host__ __device__ inline int64_t DsaCandidates(int64_t ctx, int64_t top_k, int64_t chunk) {
  if (ctx <= 0) return 0;
  const int64_t chunks = (ctx + chunk - 1) / chunk, last = ctx - (chunks - 1) * chunk;
  return (chunks - 1) * top_k + (last < top_k ? last : top_k);
}
__global__ void __launch_bounds__(sel::kSelectThreads) DsaTopKChunkKernel(BatchRef b, int64_t top_k, int64_t chunk,
                                                                          const float* scores, uint32_t* cand_key,
                                                                          int32_t* cand_pos, int64_t cand_ld) {
  __shared__ sel::SelectShared sh;
  const int64_t t = blockIdx.x, c = blockIdx.y, ctx = b.token_ctx[t], p0 = c * chunk;
  if (ctx <= top_k || ctx > b.max_ctx || p0 >= ctx) return;  // uniform over the block
  const int64_t n = ctx - p0 < chunk ? ctx - p0 : chunk;
  const float* sc = scores + t * b.max_ctx + p0;
  uint32_t* keys = cand_key + t * cand_ld + c * top_k;
  int32_t* pos = cand_pos + t * cand_ld + c * top_k;
  const auto key_at = [&](int64_t i) { return sel::OrderKey(sc[i]); };
  const sel::Threshold th = sel::RadixSelect(n, top_k, key_at, sh);
  sel::TakeSelected(n, th, key_at, sh, [&](int64_t i, int slot, uint32_t key) {
    keys[slot] = key;
    pos[slot] = static_cast<int32_t>(p0 + i);
  });
}
__global__ void __launch_bounds__(sel::kSelectThreads) DsaTopKMergeKernel(BatchRef b, int64_t top_k, int64_t chunk,
                                                                          const uint32_t* cand_key,
                                                                          const int32_t* cand_pos, int64_t cand_ld,
                                                                          int32_t* selected, int64_t ld, int32_t* err) {
  __shared__ sel::SelectShared sh;
  const int64_t t = blockIdx.x;
  int32_t* out = selected + t * ld;
  if (DsaTopKTrivial(b, t, top_k, out, err)) return;
  const int64_t n = DsaCandidates(b.token_ctx[t], top_k, chunk);
  const uint32_t* keys = cand_key + t * cand_ld;
  const int32_t* pos = cand_pos + t * cand_ld;
  const auto key_at = [&](int64_t i) { return keys[i]; };
  const sel::Threshold th = sel::RadixSelect(n, top_k, key_at, sh);
  sel::TakeSelected(n, th, key_at, sh, [&](int64_t i, int slot, uint32_t) { out[slot] = pos[i]; });
}

}  // namespace llmrt::cuda::kvk

#endif  // LLMRT_KERNELS_KV_KERNELS_CUH_
