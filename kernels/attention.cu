// The paged KV cache on the device: row writes, calibration, exports and imports, softmax
// attention of each (token, head) over its paged context, and the DSA indexer's scores and top-k.
//
// Codecs: flat F32 / BF16 rows, flat FP8 e4m3 with the layer's scale, and tiled FP8 rows
// (segments of BF16 values or FP8 tiles with float32 scales in the row: src/quant/codecs/). Writes
// encode with the CPU codecs' exact operations (FloatToFp8 is Fp8E4M3::FromFloat bit for bit), so
// the cached bytes are the CPU's; reads decode each value as the codec's DecodeRow does (code
// times scale in float32). Under the FP8 phase policy (fresh rows) the positions a pass writes
// itself are read from its BF16 fresh rows. Tiled rows are decoded value by value through a
// segment lookup: correct for every layout, not tuned.
//
// Attention is computed in chunks of positions with a running maximum (the online softmax of
// FlashAttention): for each chunk the scores, then the rescaled accumulation of the value rows.
// The scalar kernel here runs one block per (token, head) on the CUDA cores: every value is
// rounded to float32 as the CPU does; the order of the sums differs from the CPU's (it normalizes
// the probabilities before the weighted sum), well inside the conformance tolerance
// (tests/backend/attention_scenario.h). LaunchAttention runs the tensor-core kernel
// (attention_tc.cu) instead wherever it applies and is chosen (AttentionKernel).
#include <cfloat>
#include <cmath>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/attention_tc.h"
#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"

namespace llmrt::cuda {
namespace {

// Encodes `vals` (r.width floats in shared memory) into `row` by layout r: flat rows value by
// value (FP8: e4m3(x * (1 / layer_scale))), tiled rows per segment (BF16 values, or FP8 tiles
// with scale = largest magnitude / 448, 1 for an all-zero tile, codes e4m3(x * (1 / scale))):
// the CPU codecs' EncodeRow, operation for operation. The whole block calls it.
__device__ void EncodeRow(const KvRowRef& r, float layer_scale, const float* vals, uint8_t* row) {
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
  extern __shared__ float vals[];
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
  extern __shared__ float vals[];
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
// (token, head), blockIdx.y the split of its positions.
__global__ void ScalarAttentionKernel(AttentionArgs a, int32_t* err) {
  extern __shared__ float smem[];
  const int64_t t = blockIdx.x / a.heads, h = blockIdx.x % a.heads, g = h / a.kv_group;
  const int64_t split = blockIdx.y;
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
  int64_t n = ctx;
  if (sel != nullptr) {
    n = 0;
    while (n < a.top_k && sel[n] != -1) ++n;
  }
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
  const int64_t t = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
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
// tokens whose context exceeds top_k. The same float operations as the CPU (RowDot * key_scale,
// then `if (dot > 0) s += w * dot`), summed over heads in order.
__global__ void DsaScoreKernel(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef b, int64_t heads,
                               int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                               int32_t* err) {
  const int64_t t = blockIdx.y, p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
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
    if (dot > 0.0f) s += wt[h] * dot;
  }
  scores[t * b.max_ctx + p] = s == 0.0f ? 0.0f : s;  // -0 and +0 are one score (ties by position)
}

// A float's bits mapped so that unsigned order is float order.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kSelectThreads = 1024;

// One block per token: the top_k scores (ties to the earlier position) by a radix select of the
// threshold key, then the selected positions in ascending order by a block scan.
__global__ void __launch_bounds__(kSelectThreads) DsaTopKKernel(BatchRef b, int64_t top_k, const float* scores, int32_t* selected, int64_t ld,
                              int32_t* err) {
  using Reduce = cub::BlockReduce<int, kSelectThreads>;
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ int shared_count;
  const int64_t t = blockIdx.x, ctx = b.token_ctx[t];
  int32_t* out = selected + t * ld;
  if (ctx <= top_k) {  // every position: dense
    for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) out[i] = i < ctx ? static_cast<int32_t>(i) : -1;
    return;
  }
  if (ctx > b.max_ctx) {  // scores hold max_ctx positions per token
    if (threadIdx.x == 0) RaiseError(err, kErrPage);
    for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) out[i] = -1;
    return;
  }
  const float* sc = scores + t * b.max_ctx;
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = top_k;  // how many of the keys matching `prefix` are still to be taken
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t want = prefix | (1u << bit), m = mask | (1u << bit);
    int c = 0;
    for (int64_t p = threadIdx.x; p < ctx; p += blockDim.x) c += (OrderKey(sc[p]) & m) == want;
    const int total = Reduce(tmp.reduce).Sum(c);
    if (threadIdx.x == 0) shared_count = total;
    __syncthreads();
    const int ones = shared_count;
    __syncthreads();
    if (ones >= remaining) {
      prefix = want;
    } else {
      remaining -= ones;
    }
    mask = m;
  }
  // prefix is now the key of the top_k-th score; take every larger key and the first
  // `remaining` positions holding it.
  int equal_before = 0, written = 0;
  for (int64_t base = 0; base < ctx; base += blockDim.x) {
    const int64_t p = base + threadIdx.x;
    const uint32_t key = p < ctx ? OrderKey(sc[p]) : 0u;
    const int eq = (p < ctx && key == prefix) ? 1 : 0;
    int eq_rank, eq_total;
    Scan(tmp.scan).ExclusiveSum(eq, eq_rank, eq_total);
    __syncthreads();
    const int take = (p < ctx && (key > prefix || (eq && equal_before + eq_rank < remaining))) ? 1 : 0;
    int pos, take_total;
    Scan(tmp.scan).ExclusiveSum(take, pos, take_total);
    __syncthreads();
    if (take && written + pos < top_k) out[written + pos] = static_cast<int32_t>(p);
    equal_before += eq_total;
    written += take_total;
  }
}

}  // namespace

// Dynamic shared memory of a kernel holding one row of `width` floats (above 48 KiB it must be
// allowed explicitly).
template <typename Kernel>
cudaError_t RowSharedMemory(Kernel kernel, int64_t width, size_t* bytes) {
  *bytes = static_cast<size_t>(width) * sizeof(float);
  if (*bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(*bytes));
}

cudaError_t LaunchKvWrite(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err, cudaStream_t s) {
  if (batch.num_tokens == 0) return cudaSuccess;
  size_t smem = 0;
  if (const cudaError_t e = RowSharedMemory(KvWriteKernel, kv.width, &smem); e != cudaSuccess) return e;
  KvWriteKernel<<<static_cast<unsigned>(batch.num_tokens), 128, smem, s>>>(kv, layer, parts, batch, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvCalibrate(KvRef kv, int64_t layer, KvParts parts, cudaStream_t s) {
  KvCalibrateKernel<<<1, kCalibrateThreads, 0, s>>>(kv, layer, parts);
  return cudaGetLastError();
}

cudaError_t LaunchKvExportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, uint8_t* dst, int32_t* err,
                               cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  KvExportKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, layer, slots, dst, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvImportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, const uint8_t* src,
                               KvRowRef src_row, float src_scale, bool same_codec, int32_t* err, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  size_t smem = 0;
  if (const cudaError_t e = RowSharedMemory(KvImportKernel, kv.width, &smem); e != cudaSuccess) return e;
  KvImportKernel<<<static_cast<unsigned>(n), 128, smem, s>>>(kv, layer, slots, src, src_row, src_scale, same_codec,
                                                             err);
  return cudaGetLastError();
}

int64_t AttentionBlocksPerToken(const AttentionArgs& a) {
  TcPlan plan;
  return PlanTensorCoreAttention(a, &plan) ? plan.head_tiles : a.heads;
}

cudaError_t LaunchAttention(const AttentionArgs& a, int32_t* err, cudaStream_t s) {
  const int64_t blocks = a.batch.num_tokens * a.heads;
  if (blocks == 0) return cudaSuccess;
  if (TcPlan plan; PlanTensorCoreAttention(a, &plan)) {
    const cudaError_t e = LaunchTensorCoreAttention(a, plan, err, s);
    if (e != cudaSuccess || a.splits == 1) return e;
    AttentionCombineKernel<<<static_cast<unsigned>(blocks), kAttnThreads, 0, s>>>(a);
    return cudaGetLastError();
  }
  const size_t smem = static_cast<size_t>(a.q1_len + a.q2_len + a.dv + kChunk) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(ScalarAttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.splits));
  ScalarAttentionKernel<<<grid, kAttnThreads, smem, s>>>(a, err);
  if (a.splits == 1) return cudaGetLastError();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  AttentionCombineKernel<<<static_cast<unsigned>(blocks), kAttnThreads, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchDsaSelect(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef batch, int64_t heads,
                            int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                            int32_t* selected, int64_t selected_ld, int32_t* err, cudaStream_t s) {
  if (batch.num_tokens == 0) return cudaSuccess;
  if (batch.max_ctx > top_k) {
    const dim3 grid(BlocksFor(batch.max_ctx, 128), static_cast<unsigned>(batch.num_tokens));
    DsaScoreKernel<<<grid, 128, 0, s>>>(q, w, kv, layer, batch, heads, head_dim, key_offset, key_scale, top_k, scores,
                                        err);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  DsaTopKKernel<<<static_cast<unsigned>(batch.num_tokens), kSelectThreads, 0, s>>>(batch, top_k, scores, selected,
                                                                                   selected_ld, err);
  return cudaGetLastError();
}

}  // namespace llmrt::cuda
