// The paged KV cache on the device: row writes, exports and imports (flat F32 / BF16 rows), softmax
// attention of each (token, head) over its paged context, and the DSA indexer's scores and top-k.
//
// Attention is computed in chunks of positions with a running maximum (the online softmax of
// FlashAttention): for each chunk the scores, then the rescaled accumulation of the value rows.
// One block per (token, head). Every value is rounded to float32 as the CPU does; the order of
// the sums differs from the CPU's (it normalizes the probabilities before the weighted sum), well
// inside the conformance tolerance (tests/backend/attention_scenario.h).
#include <cfloat>
#include <cmath>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/common.cuh"

namespace llmrt::cuda {
namespace {

__device__ __forceinline__ const uint8_t* RowAt(const KvRef& kv, int64_t page, int64_t layer, int64_t row) {
  return kv.pages + ((page * kv.num_layers + layer) * kv.page_size + row) * kv.row_bytes;
}

__device__ __forceinline__ bool SlotOk(const KvRef& kv, int32_t slot) {
  return slot >= 0 && slot / kv.page_size < kv.num_pages;
}

__device__ __forceinline__ uint8_t* SlotRow(const KvRef& kv, int64_t layer, int32_t slot) {
  return const_cast<uint8_t*>(RowAt(kv, slot / kv.page_size, layer, slot % kv.page_size));
}

// One block per token: parts side by side from column 0, converted to the cache's element type.
__global__ void KvWriteKernel(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err) {
  const int64_t t = blockIdx.x;
  const int32_t slot = batch.slot_mapping[t];
  if (!SlotOk(kv, slot)) {
    RaiseError(err, kErrSlot);
    return;
  }
  uint8_t* row = SlotRow(kv, layer, slot);
  int64_t start = 0;
  for (int p = 0; p < parts.count; ++p) {
    const ConstMat& m = parts.part[p];
    for (int64_t i = threadIdx.x; i < m.cols; i += blockDim.x) StoreElem(row, kv.type, start + i, m.data[t * m.ld + i]);
    start += m.cols;
  }
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

__global__ void KvImportKernel(KvRef kv, int64_t layer, const int32_t* slots, const uint8_t* src, int32_t src_type,
                               int64_t src_row_bytes, int32_t* err) {
  const int64_t i = blockIdx.x;
  const int32_t slot = slots[i];
  if (!SlotOk(kv, slot)) {
    RaiseError(err, kErrSlot);
    return;
  }
  uint8_t* row = SlotRow(kv, layer, slot);
  const uint8_t* in = src + i * src_row_bytes;
  if (src_type == kv.type) {  // the same codec keeps the bytes as they were
    for (int64_t b = threadIdx.x; b < kv.row_bytes; b += blockDim.x) row[b] = in[b];
    return;
  }
  for (int64_t v = threadIdx.x; v < kv.width; v += blockDim.x) StoreElem(row, kv.type, v, LoadElem(in, src_type, v));
}

constexpr int kAttnThreads = 128, kChunk = 32;

// Dynamic shared memory: q [q1_len + q2_len], acc [dv], scores [kChunk]. blockIdx.x is the
// (token, head), blockIdx.y the split of its positions.
__global__ void AttentionKernel(AttentionArgs a, int32_t* err) {
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
  const int64_t ctx = b.token_ctx[t];
  const int32_t* pages = b.page_ids + b.seq_page_start[b.token_seq[t]];
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
  float m = -INFINITY, l = 0.0f;
  bool bad = false;  // uniform over the block: every thread checks the same positions
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int cn = static_cast<int>(end - c0 < kChunk ? end - c0 : kChunk);
    // Scores: one warp per position.
    for (int i = warp; i < cn; i += warps) {
      const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
      float s = -INFINITY;
      if (p >= 0 && p < ctx && pages[p / a.kv.page_size] >= 0 && pages[p / a.kv.page_size] < a.kv.num_pages) {
        const uint8_t* row = RowAt(a.kv, pages[p / a.kv.page_size], a.layer, p % a.kv.page_size);
        float d = 0.0f;
        for (int64_t i1 = lane; i1 < a.q1_len; i1 += 32) d = fmaf(q[i1], LoadElem(row, a.kv.type, k1 + i1), d);
        for (int64_t i2 = lane; i2 < a.q2_len; i2 += 32) {
          d = fmaf(q[a.q1_len + i2], LoadElem(row, a.kv.type, a.k2_off + i2), d);
        }
        s = WarpSum(d) * a.scale;
      }
      if (lane == 0) sc[i] = s;
    }
    __syncthreads();
    float cmax = -INFINITY;
    for (int i = 0; i < cn; ++i) {
      const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
      if (p < 0 || p >= ctx || pages[p / a.kv.page_size] < 0 || pages[p / a.kv.page_size] >= a.kv.num_pages) bad = true;
      cmax = fmaxf(cmax, sc[i]);
    }
    const float new_m = fmaxf(m, cmax);
    const float factor = m == -INFINITY ? 0.0f : expf(m - new_m);
    float psum = 0.0f;
    for (int i = 0; i < cn; ++i) psum += sc[i] == -INFINITY ? 0.0f : expf(sc[i] - new_m);
    l = l * factor + psum;
    for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) {
      float o = acc[j] * factor;
      for (int i = 0; i < cn; ++i) {
        if (sc[i] == -INFINITY) continue;
        const int64_t p = sel != nullptr ? sel[c0 + i] : c0 + i;
        const uint8_t* row = RowAt(a.kv, pages[p / a.kv.page_size], a.layer, p % a.kv.page_size);
        o = fmaf(expf(sc[i] - new_m), LoadElem(row, a.kv.type, v_off + j), o);
      }
      acc[j] = o;
    }
    m = new_m;
    __syncthreads();  // sc is rewritten by the next chunk
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
  const int32_t page = b.page_ids[b.seq_page_start[b.token_seq[t]] + p / kv.page_size];
  if (page < 0 || page >= kv.num_pages) {
    RaiseError(err, kErrPage);
    scores[t * b.max_ctx + p] = 0.0f;
    return;
  }
  const uint8_t* row = RowAt(kv, page, layer, p % kv.page_size);
  const float* qt = q.data + t * q.ld;
  const float* wt = w.data + t * w.ld;
  float s = 0.0f;
  for (int64_t h = 0; h < heads; ++h) {
    float d = 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) d = fmaf(qt[h * head_dim + i], LoadElem(row, kv.type, key_offset + i), d);
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
__global__ void DsaTopKKernel(BatchRef b, int64_t top_k, const float* scores, int32_t* selected, int64_t ld,
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

cudaError_t LaunchKvWrite(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err, cudaStream_t s) {
  if (batch.num_tokens == 0) return cudaSuccess;
  KvWriteKernel<<<static_cast<unsigned>(batch.num_tokens), 128, 0, s>>>(kv, layer, parts, batch, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvExportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, uint8_t* dst, int32_t* err,
                               cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  KvExportKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, layer, slots, dst, err);
  return cudaGetLastError();
}

cudaError_t LaunchKvImportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, const uint8_t* src,
                               Elem src_type, int64_t src_row_bytes, int32_t* err, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  KvImportKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(kv, layer, slots, src, src_type, src_row_bytes, err);
  return cudaGetLastError();
}

cudaError_t LaunchAttention(const AttentionArgs& a, int32_t* err, cudaStream_t s) {
  const int64_t blocks = a.batch.num_tokens * a.heads;
  if (blocks == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(a.q1_len + a.q2_len + a.dv + kChunk) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(AttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.splits));
  AttentionKernel<<<grid, kAttnThreads, smem, s>>>(a, err);
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
