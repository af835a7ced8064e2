// MLA attention in latent space over the paged cache (DeepSeek-V2/V3 "weight absorption").
// Each cached position holds c = kv_a_layernorm(latent) [kv_lora] followed by the roped shared
// key k_rope [rope]; every head scores against the same row, so the cache behaves as a single
// key/value head of width kv_lora + rope (MQA), and per-head keys and values never materialize.
// A work item takes one token and several heads (AttendHeads): the rows it reads are decoded
// once, and the heads' scores and weighted values are small matmuls over them.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/kernels.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// Rows [r0, r0 + n) of an MLA kv_b as the dense kernels read them. F32 and BF16 rows are read
// where they are; FP8 block-scaled ones (kept so by the loader: a quarter of the F32 copy's
// memory and traffic) are dequantized into `scratch`, one head's part at a time, to the floats
// a kv_b dequantized at load holds, so the results are the same. Other formats are refused.
struct KvBRows {
  DType dtype;
  const void* data;
};
KvBRows KvBRowsOf(const Weight& w, int64_t r0, int64_t n, cpu::CacheLineVector<float>& scratch) {
  if (w.format == kWeightFp8Block) {
    scratch.resize(static_cast<size_t>(n * w.cols));
    cpu::Fp8BlockRowsToF32(w.data.data_as<uint8_t>(), w.scales.data_as<float>(), w.cols, w.params.block_rows,
                           w.params.block_cols, r0, n, scratch.data());
    return {DType::kF32, scratch.data()};
  }
  LLMRT_CHECK(w.format == kWeightBf16 || w.format == kWeightF32);
  const DType dt = w.format == kWeightBf16 ? DType::kBF16 : DType::kF32;
  return {dt, w.data.data_as<uint8_t>() + static_cast<size_t>(r0 * w.cols) * DTypeSize(dt)};
}

// Address of row `row` of `layer` in page `page`.
uint8_t* CacheRow(const KvCacheView& c, int64_t page, int64_t layer, int64_t row) {
  const int64_t index = ((page * c.num_layers + layer) * c.page_size + row);
  return c.pages.data_as<uint8_t>() + static_cast<size_t>(index) * static_cast<size_t>(c.row_bytes);
}

bool IsBuiltinCodec(const KvCodec& c) { return c.id() <= kKvCodecFp8Tiled; }

// ---- mixed rows (the tiled FP8 codec's KvRowLayout) ----

const float* TileScales(const KvRowLayout& l, const uint8_t* row) {
  return reinterpret_cast<const float*>(row + l.scale_offset);
}

// Calls fn(segment, tile scale or 1, first value, count) for each stretch of values
// [start, start + n) lying in one BF16 segment or one FP8 tile.
template <typename Fn>
void ForEachTiledRun(const KvRowLayout& l, const uint8_t* row, int64_t start, int64_t n, Fn fn) {
  const float* scales = TileScales(l, row);
  const int64_t end = start + n;
  for (const KvSegment& s : l.segments) {
    const int64_t a = std::max(start, s.start), b = std::min(end, s.start + s.count);
    if (a >= b) continue;
    if (s.bf16) {
      fn(s, 1.0f, a, b - a);
      continue;
    }
    for (int64_t v = a; v < b;) {
      const int64_t k = (v - s.start) / s.tile, tile_end = std::min(b, s.start + (k + 1) * s.tile);
      fn(s, scales[s.first_scale + k], v, tile_end - v);
      v = tile_end;
    }
  }
}

float LayerScale(const KvCacheView& c, int64_t layer) {
  return c.codec->scale_kind() == KvScaleKind::kPerLayer ? c.scales.data_as<float>()[layer] : 1.0f;
}

// A cache row as attention reads it: its bytes, their element type and the codec's layer scale,
// or the mixed layout whose segments say so.
struct Row {
  const uint8_t* data;
  DType dtype;
  float scale;
  const KvRowLayout* mixed = nullptr;
};

// dst[i] = row[start + i] for i < n as float32, over a cache row of any codec (FP8 codes times
// their scale, rounded once; bf16 and f32 values exactly).
void RowToF32(const Row& r, int64_t start, int64_t n, float* dst) {
  if (r.mixed != nullptr) {
    ForEachTiledRun(*r.mixed, r.data, start, n, [&](const KvSegment& s, float scale, int64_t v, int64_t len) {
      const uint8_t* codes = r.data + s.byte_offset + (v - s.start) * (s.bf16 ? 2 : 1);
      cpu::ToF32(scale, s.bf16 ? DType::kBF16 : DType::kF8E4M3, codes, dst + (v - start), len);
    });
    return;
  }
  cpu::ToF32(r.dtype == DType::kF8E4M3 ? r.scale : 1.0f, r.dtype, r.data + start * DTypeSize(r.dtype), dst, n);
}

// Where token t of the batch reads position p of its sequence: the layer's cache pages, or,
// under the FP8 phase policy, the BF16 fresh rows of the positions this pass writes itself.
// Codecs without a CPU row kernel (registered ones beyond the built-ins) are decoded by their
// scalar reference into a per-thread float row.
struct RowSource {
  const KvCacheView& cache;
  int64_t layer;
  const int32_t* pages;  // t's sequence's pages
  DType dtype;
  float scale;
  bool generic;
  int64_t fresh_from = INT64_MAX;  // first position served from fresh rows
  const uint8_t* fresh = nullptr;  // fresh row of position fresh_from
  size_t fresh_stride = 0;

  RowSource(const KvCacheView& c, int64_t l, const AttentionBatch& b, int64_t t)
      : cache(c), layer(l), pages(b.page_ids.data_as<int32_t>() + b.seq_page_start.data_as<int32_t>()[b.token_seq.data_as<int32_t>()[t]]),
        dtype(c.codec->dtype()), scale(LayerScale(c, l)), generic(!IsBuiltinCodec(*c.codec)) {
    if (c.fresh_rows == 0) return;
    const int32_t first = b.seq_first_token.data_as<int32_t>()[b.token_seq.data_as<int32_t>()[t]];
    fresh_from = b.token_ctx.data_as<int32_t>()[first] - 1;  // position of the sequence's first row
    fresh_stride = static_cast<size_t>(c.width) * sizeof(uint16_t);
    fresh = c.fresh.data_as<uint8_t>() + static_cast<size_t>(first) * fresh_stride;
  }
  Row operator()(int64_t p) const {
    if (p >= fresh_from) return {fresh + static_cast<size_t>(p - fresh_from) * fresh_stride, DType::kBF16, 1.0f};
    const uint8_t* row = CacheRow(cache, pages[p / cache.page_size], layer, p % cache.page_size);
    if (generic) {
      thread_local cpu::CacheLineVector<float> decoded;
      decoded.resize(static_cast<size_t>(cache.width));
      cache.codec->DecodeRow(*cache.layout, row, scale, decoded.data());
      return {reinterpret_cast<const uint8_t*>(decoded.data()), DType::kF32, 1.0f};
    }
    return {row, dtype, scale, cache.layout->mixed() ? cache.layout : nullptr};
  }
};

// Where one attention work item reads its keys and values in a cache row.
struct HeadSpan {
  int64_t k_off, kd;  // keys: values [k_off, k_off + kd) of the row
  int64_t v_off, vd;  // values: [v_off, v_off + vd)
};

// Softmax attention of `heads` query rows of one token (q, row stride ldq), which share their
// keys and values (an MLA token's heads, a GQA group), over `n` positions of its paged sequence:
// positions selected[0..n), or [0, n) when `selected` is null. out (row stride ldo) gets
// softmax(scale * q k^T) v per head: float32 scores and weights, max-subtracted, summed in double.
//
// The rows are decoded to float32 once per work item, in chunks that stay in L2 (one chunk when
// the whole context fits), and each chunk's scores for every head are one small matmul
// (MatMulRows: bit-identical whatever the number of heads), its weighted values one
// AccumulateRows: so the rows are read once for all the heads, not once per head, and a head's
// result does not depend on how heads are grouped into work items, nor on the batch.
constexpr int64_t kAttendKeepFloats = 1 << 18;  // whole context decoded at once up to 1 MiB
constexpr int64_t kAttendChunkRows = 64;
constexpr int64_t kAttendPrefetchBytes = 8 << 10;
void AttendHeads(const RowSource& src, int64_t n, const int32_t* selected, const float* q, int64_t ldq,
                 int64_t heads, const HeadSpan& s, float scale, float* out, int64_t ldo) {
  for (int64_t h = 0; h < heads; ++h) std::fill(out + h * ldo, out + h * ldo + s.vd, 0.0f);
  if (n == 0) return;
  // MLA's values are the keys' first kv_lora columns: decoded once, as part of the keys.
  const bool shared = s.v_off >= s.k_off && s.v_off + s.vd <= s.k_off + s.kd;
  const int64_t row_floats = s.kd + (shared ? 0 : s.vd);
  const int64_t chunk = n * row_floats <= kAttendKeepFloats ? n : kAttendChunkRows;
  thread_local cpu::CacheLineVector<float> keys, values, scores;
  keys.resize(static_cast<size_t>(chunk * s.kd));
  if (!shared) values.resize(static_cast<size_t>(chunk * s.vd));
  scores.resize(static_cast<size_t>(heads * n));
  // The rows a few KiB ahead are requested while these are decoded, and the next chunk's first
  // ones while this chunk's products run: a sequence's rows are short runs of a page each (one
  // layer's rows of a page, or one KV head's part of each row), which the hardware prefetchers
  // pick up late or not at all, so that without this decoding stalls on every row's first loads.
  const int64_t row_bytes_read = (s.kd + (shared ? 0 : s.vd)) * static_cast<int64_t>(DTypeSize(src.dtype));
  const int64_t ahead = std::max<int64_t>(2, kAttendPrefetchBytes / std::max<int64_t>(row_bytes_read, 1));
  // (Rows of registered codecs are decoded by src() itself, into one per-thread row: not here.)
  auto prefetch = [&](int64_t i, bool with_keys, bool with_values) {
    if (i >= n || src.generic) return;
    const Row r = src(selected != nullptr ? selected[i] : i);
    const int64_t es = static_cast<int64_t>(DTypeSize(r.dtype));
    auto lines = [](const uint8_t* p, int64_t bytes) {
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
      if (bytes > 0) __builtin_prefetch(p + bytes - 1, 0, 2);
    };
    if (r.mixed != nullptr) {
      lines(r.data, src.cache.row_bytes);
      return;
    }
    if (with_keys) lines(r.data + s.k_off * es, s.kd * es);
    if (with_values) lines(r.data + s.v_off * es, s.vd * es);
  };
  auto decode = [&](int64_t i0, int64_t cn, bool with_keys, bool with_values) {
    for (int64_t i = 0; i < cn; ++i) {
      prefetch(i0 + i + ahead, with_keys, with_values);
      const Row r = src(selected != nullptr ? selected[i0 + i] : i0 + i);
      if (with_keys) RowToF32(r, s.k_off, s.kd, keys.data() + i * s.kd);
      if (with_values) RowToF32(r, s.v_off, s.vd, values.data() + i * s.vd);
    }
  };
  const bool once = chunk == n;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t cn = std::min(chunk, n - i0);
    decode(i0, cn, true, once && !shared);
    cpu::MatMulRows(DType::kF32, keys.data(), s.kd, q, ldq, heads, scores.data() + i0, n, 0, cn);
  }
  for (int64_t h = 0; h < heads; ++h) cpu::SoftmaxScaled(scores.data() + h * n, n, scale);
  const float* v = shared ? keys.data() + (s.v_off - s.k_off) : values.data();
  const int64_t ldv = shared ? s.kd : s.vd;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t cn = std::min(chunk, n - i0);
    if (!once) decode(i0, cn, shared, !shared);
    cpu::AccumulateRows(scores.data() + i0, n, heads, DType::kF32, v, ldv, cn, s.vd, out, ldo);
  }
}

// How many heads one attention work item takes: one item per thread when there are fewer tokens
// than threads (decode has one token per session), and at most kAttendScoreFloats scores per
// item. Every item decodes all its token's rows, so more items than threads only multiply that
// work and the cache traffic: Kimi K2's MLA over 32K positions for one session ran in 0.47x the
// time with 2 items on 2 threads than with 8 (llmrt_attention_microbench). Results do not
// depend on it.
constexpr int64_t kAttendScoreFloats = 1 << 20;
int64_t HeadsPerItem(int64_t heads, int64_t tokens, int64_t max_ctx, int threads) {
  int64_t items = std::max<int64_t>(1, (threads + tokens - 1) / tokens);
  items = std::max(items, (heads * std::max<int64_t>(max_ctx, 1) + kAttendScoreFloats - 1) / kAttendScoreFloats);
  items = std::min(items, heads);
  return (heads + items - 1) / items;
}

// The values of token t's row: the parts side by side, zeros after.
void GatherRowValues(std::initializer_list<Tensor> parts, int64_t t, cpu::CacheLineVector<float>& values) {
  std::fill(values.begin(), values.end(), 0.0f);
  float* v = values.data();
  for (const Tensor& p : parts) {
    std::memcpy(v, p.data_as<float>() + t * p.row_stride(), p.row_size() * sizeof(float));
    v += p.row_size();
  }
}

}  // namespace

void CpuBackend::KvCalibrate(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts) {
  Run("KvCalibrate", [&] {
    LLMRT_CHECK(cache.codec->scale_kind() == KvScaleKind::kPerLayer && layer >= 0 && layer < cache.num_layers);
    float amax = 0.0f;
    for (const Tensor& p : parts) {
      for (int64_t t = 0; t < p.dim(0); ++t) {
        const float* a = p.data_as<float>() + t * p.row_stride();
        for (int64_t i = 0; i < p.row_size(); ++i) amax = std::max(amax, std::fabs(a[i]));
      }
    }
    cache.scales.data_as<float>()[layer] = cache.codec->CalibratedScale(amax);
  });
}

void CpuBackend::KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
                         const AttentionBatch& batch) {
  Run("KvWrite", [&] {
    const int64_t T = batch.num_tokens;
    int64_t width = 0;
    for (const Tensor& p : parts) {
      LLMRT_CHECK(p.dim(0) == T);
      width += p.row_size();
    }
    LLMRT_CHECK(width <= cache.width);
    const int32_t* slots = batch.slot_mapping.data_as<int32_t>();
    const float scale = LayerScale(cache, layer);
    LLMRT_CHECK(scale > 0.0f);
    thread_local cpu::CacheLineVector<float> values;
    values.resize(static_cast<size_t>(cache.width));
    if (cache.fresh_rows > 0) {  // this pass's own rows, in BF16, for its attention
      LLMRT_CHECK(T <= cache.fresh_rows);
      for (int64_t t = 0; t < T; ++t) {
        GatherRowValues(parts, t, values);
        F32ToBf16Array(values.data(), cache.fresh.data_as<uint16_t>() + t * cache.width, width);
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t page = slots[t] / cache.page_size, row = slots[t] % cache.page_size;
      LLMRT_CHECK(slots[t] >= 0 && page < cache.num_pages);
      GatherRowValues(parts, t, values);
      cache.codec->EncodeRow(*cache.layout, values.data(), scale, CacheRow(cache, page, layer, row));
    }
  });
}

void CpuBackend::KvExportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& dst) {
  Run("KvExportRows", [&] {
    const int64_t n = slots.numel();
    const size_t row_bytes = static_cast<size_t>(cache.row_bytes);
    LLMRT_CHECK(dst.bytes() >= static_cast<size_t>(n) * row_bytes && dst.contiguous());
    const int32_t* s = slots.data_as<int32_t>();
    uint8_t* out = dst.data_as<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      LLMRT_CHECK(s[i] >= 0 && s[i] / cache.page_size < cache.num_pages);
      std::memcpy(out + i * row_bytes, CacheRow(cache, s[i] / cache.page_size, layer, s[i] % cache.page_size),
                  row_bytes);
    }
  });
}

void CpuBackend::KvImportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& src,
                              const KvCodec& src_codec, const KvRowLayout& src_layout, float src_scale) {
  Run("KvImportRows", [&] {
    const int64_t n = slots.numel(), W = cache.width;
    const size_t src_row = static_cast<size_t>(src_layout.row_bytes);
    LLMRT_CHECK(src_layout.width == W && src.bytes() >= static_cast<size_t>(n) * src_row);
    const float scale = LayerScale(cache, layer);
    LLMRT_CHECK(scale > 0.0f);
    // The same codec at the same scale keeps the bytes as they were.
    const bool same = src_codec.id() == cache.codec->id() &&
                      (cache.codec->scale_kind() != KvScaleKind::kPerLayer || scale == src_scale);
    thread_local cpu::CacheLineVector<float> values;
    values.resize(static_cast<size_t>(W));
    const int32_t* s = slots.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      LLMRT_CHECK(s[i] >= 0 && s[i] / cache.page_size < cache.num_pages);
      const uint8_t* r = src.data_as<uint8_t>() + static_cast<size_t>(i) * src_row;
      uint8_t* dst = CacheRow(cache, s[i] / cache.page_size, layer, s[i] % cache.page_size);
      if (same) {
        std::memcpy(dst, r, src_row);
        continue;
      }
      src_codec.DecodeRow(src_layout, r, src_scale, values.data());
      cache.codec->EncodeRow(*cache.layout, values.data(), scale, dst);
    }
  });
}

// Grouped-query attention over the paged cache; each cache row is [K heads | V heads].
void CpuBackend::GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer, const AttentionBatch& batch,
                              int64_t heads, int64_t kv_heads, int64_t head_dim, float scale, const Tensor& out) {
  Run("GqaAttention", [&] {
    const int64_t T = batch.num_tokens, group = heads / kv_heads;
    LLMRT_CHECK(cache.width == 2 * kv_heads * head_dim && q.row_size() == heads * head_dim && out.dim(0) == T);
    const int32_t* tctx = batch.token_ctx.data_as<int32_t>();
    // Items: (token, KV head, a part of its group of query heads).
    const int64_t per = HeadsPerItem(group, T * kv_heads, batch.max_ctx, pool_.num_threads());
    const int64_t parts = (group + per - 1) / per;
    pool_.ParallelFor(static_cast<size_t>(T * kv_heads * parts), 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const int64_t t = static_cast<int64_t>(i) / (kv_heads * parts), g = static_cast<int64_t>(i) / parts % kv_heads;
        const int64_t h0 = g * group + static_cast<int64_t>(i) % parts * per, nh = std::min(per, (g + 1) * group - h0);
        const RowSource src(cache, layer, batch, t);
        const HeadSpan span{g * head_dim, head_dim, (kv_heads + g) * head_dim, head_dim};
        AttendHeads(src, tctx[t], /*selected=*/nullptr, q.data_as<float>() + t * q.row_stride() + h0 * head_dim,
                    head_dim, nh, span, scale, out.data_as<float>() + t * out.row_stride() + h0 * head_dim, head_dim);
      }
    });
  });
}

void CpuBackend::MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d,
                                const Tensor& q_lat) {
  Run("MlaAbsorbQuery", [&] {
    const int64_t T = q.dim(0), qw = d.nope + d.rope, blk = d.nope + d.v;
    LLMRT_CHECK(q.row_size() == d.heads * qw && kv_b.rows == d.heads * blk && kv_b.cols == d.kv_lora);
    LLMRT_CHECK(q_lat.dim(0) == T && q_lat.row_size() == d.heads * d.kv_lora);
    // Per head: its W_UK rows (dequantized once for all tokens when stored as FP8), then every
    // token: q_lat = sum_i q_nope[i] * W_UK[i, :] over rows i of head h's block.
    pool_.ParallelFor(static_cast<size_t>(d.heads), 1, [&](size_t b, size_t e) {
      thread_local cpu::CacheLineVector<float> scratch;
      for (size_t hh = b; hh < e; ++hh) {
        const int64_t h = static_cast<int64_t>(hh);
        const KvBRows w = KvBRowsOf(kv_b, h * blk, d.nope, scratch);
        float* out = q_lat.data_as<float>() + h * d.kv_lora;
        for (int64_t t = 0; t < T; ++t) std::fill(out + t * q_lat.row_stride(), out + t * q_lat.row_stride() + d.kv_lora, 0.0f);
        cpu::AccumulateRows(q.data_as<float>() + h * qw, q.row_stride(), T, w.dtype, w.data, d.kv_lora, d.nope,
                            d.kv_lora, out, q_lat.row_stride());
      }
    });
  });
}

void CpuBackend::MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache,
                              int64_t layer, const AttentionBatch& batch, const MlaDims& d,
                              float scale, const Tensor* selected, const Tensor& out_lat) {
  Run("MlaAttention", [&] {
    const int64_t T = batch.num_tokens, H = d.heads, W = d.kv_lora + d.rope;
    LLMRT_CHECK(cache.width >= W && q_lat.dim(0) == T && out_lat.dim(0) == T);
    const bool sparse = selected != nullptr;
    LLMRT_CHECK(!sparse || selected->dim(0) == T);
    const int64_t top_k = sparse ? selected->row_size() : 0;
    const int32_t* tctx = batch.token_ctx.data_as<int32_t>();
    const int64_t qw = d.nope + d.rope;
    // The tokens attended here: all, or (listed) those of the sequences that bring fewer than
    // skip_seq_tokens tokens (a sequence's rows are contiguous).
    std::vector<int32_t> tokens;
    if (batch.skip_seq_tokens > 0) {
      const int32_t* tseq = batch.token_seq.data_as<int32_t>();
      const int32_t* first = batch.seq_first_token.data_as<int32_t>();
      LLMRT_CHECK(first != nullptr && batch.seq_first_token.numel() >= batch.num_seqs);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s = tseq[t], end = s + 1 < batch.num_seqs ? first[s + 1] : T;
        if (end - first[s] < batch.skip_seq_tokens) tokens.push_back(static_cast<int32_t>(t));
      }
    }
    const int64_t n_tokens = batch.skip_seq_tokens > 0 ? static_cast<int64_t>(tokens.size()) : T;
    if (n_tokens == 0) return;
    const int64_t per =
        HeadsPerItem(H, n_tokens, sparse ? std::min(top_k, batch.max_ctx) : batch.max_ctx, pool_.num_threads());
    const int64_t parts = (H + per - 1) / per;
    // Items: (token, a part of its heads); every head scores against the same rows.
    pool_.ParallelFor(static_cast<size_t>(n_tokens * parts), 1, [&](size_t b, size_t e) {
      thread_local cpu::CacheLineVector<float> qc;
      for (size_t i = b; i < e; ++i) {
        const int64_t it = static_cast<int64_t>(i) / parts, t = tokens.empty() ? it : tokens[it];
        const int64_t h0 = static_cast<int64_t>(i) % parts * per;
        const int64_t nh = std::min(per, H - h0);
        const RowSource src(cache, layer, batch, t);
        // The queries against a cache row: [q_lat (kv_lora) | q_rope (rope)] per head.
        qc.resize(static_cast<size_t>(nh * W));
        for (int64_t h = 0; h < nh; ++h) {
          std::memcpy(qc.data() + h * W, q_lat.data_as<float>() + t * q_lat.row_stride() + (h0 + h) * d.kv_lora,
                      d.kv_lora * sizeof(float));
          std::memcpy(qc.data() + h * W + d.kv_lora, q.data_as<float>() + t * q.row_stride() + (h0 + h) * qw + d.nope,
                      d.rope * sizeof(float));
        }
        const int32_t* sel = nullptr;
        int64_t n = tctx[t];
        if (sparse) {
          sel = selected->data_as<int32_t>() + t * top_k;
          n = std::find(sel, sel + top_k, -1) - sel;
        }
        AttendHeads(src, n, sel, qc.data(), W, nh, HeadSpan{0, W, 0, d.kv_lora}, scale,
                    out_lat.data_as<float>() + t * out_lat.row_stride() + h0 * d.kv_lora, d.kv_lora);
      }
    });
  });
}

void CpuBackend::DsaSelect(const Tensor& q, const Tensor& w, const KvCacheView& cache, int64_t layer,
                           const AttentionBatch& batch, int64_t heads, int64_t head_dim, int64_t key_offset,
                           float key_scale, int64_t top_k, const Tensor& selected) {
  Run("DsaSelect", [&] {
    const int64_t T = batch.num_tokens;
    LLMRT_CHECK(q.dim(0) == T && q.row_size() == heads * head_dim && w.dim(0) == T && w.row_size() == heads);
    LLMRT_CHECK(key_offset + head_dim <= cache.width && selected.dim(0) == T && selected.row_size() == top_k);
    const int32_t* tctx = batch.token_ctx.data_as<int32_t>();
    // Scores of every token whose context exceeds top_k, in chunks of positions spread over the
    // pool (decode has one token per session, so parallelism comes from the context).
    constexpr int64_t kChunk = 256;
    std::vector<int64_t> offset(T + 1, 0);
    std::vector<std::pair<int32_t, int32_t>> chunks;  // (token, first position)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t ctx = tctx[t];
      offset[t + 1] = offset[t] + (ctx > top_k ? ctx : 0);
      if (ctx <= top_k) continue;
      for (int64_t p = 0; p < ctx; p += kChunk) chunks.emplace_back(static_cast<int32_t>(t), static_cast<int32_t>(p));
    }
    std::vector<float> score(static_cast<size_t>(offset[T]));
    pool_.ParallelFor(chunks.size(), 1, [&](size_t b, size_t e) {
      // A chunk's keys decoded to float32 once, then every head's dot products as one small
      // matmul (heads x positions), so the keys are read once for all the heads.
      thread_local cpu::CacheLineVector<float> keys, dots;
      keys.resize(static_cast<size_t>(kChunk * head_dim));
      dots.resize(static_cast<size_t>(heads * kChunk));
      for (size_t c = b; c < e; ++c) {
        const int64_t t = chunks[c].first, p0 = chunks[c].second, p1 = std::min<int64_t>(p0 + kChunk, tctx[t]);
        const RowSource src(cache, layer, batch, t);
        const float* qt = q.data_as<float>() + t * q.row_stride();
        const float* wt = w.data_as<float>() + t * w.row_stride();
        float* out = score.data() + offset[t];
        for (int64_t p = p0; p < p1; ++p) RowToF32(src(p), key_offset, head_dim, keys.data() + (p - p0) * head_dim);
        cpu::MatMulRows(DType::kF32, keys.data(), head_dim, qt, head_dim, heads, dots.data(), kChunk, 0, p1 - p0);
        for (int64_t p = p0; p < p1; ++p) {
          float s = 0.0f;
          for (int64_t h = 0; h < heads; ++h) {
            const float dot = dots[h * kChunk + (p - p0)] * key_scale;
            if (dot > 0.0f) s += wt[h] * dot;  // w[h] * relu(q_h . k)
          }
          out[p] = s;
        }
      }
    });
    pool_.ParallelFor(static_cast<size_t>(T), 1, [&](size_t b, size_t e) {
      std::vector<int32_t> order;
      for (size_t ti = b; ti < e; ++ti) {
        const int64_t t = static_cast<int64_t>(ti), ctx = tctx[t];
        int32_t* out = selected.data_as<int32_t>() + t * top_k;
        if (ctx <= top_k) {  // every position is selected: dense
          for (int64_t i = 0; i < top_k; ++i) out[i] = i < ctx ? static_cast<int32_t>(i) : -1;
          continue;
        }
        const float* sc = score.data() + offset[t];
        order.resize(ctx);
        for (int64_t p = 0; p < ctx; ++p) order[p] = static_cast<int32_t>(p);
        std::nth_element(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t c) {
          return sc[a] != sc[c] ? sc[a] > sc[c] : a < c;
        });
        std::sort(order.begin(), order.begin() + top_k);
        std::copy(order.begin(), order.begin() + top_k, out);
      }
    });
  });
}

void CpuBackend::MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d,
                                 const Tensor& out) {
  Run("MlaProjectValue", [&] {
    const int64_t T = o_lat.dim(0), blk = d.nope + d.v;
    LLMRT_CHECK(out.dim(0) == T && out.row_size() == d.heads * d.v);
    pool_.ParallelFor(static_cast<size_t>(d.heads), 1, [&](size_t b, size_t e) {
      thread_local cpu::CacheLineVector<float> scratch;
      for (size_t h = b; h < e; ++h) {
        // W_UV of head h: rows [h*blk + nope, h*blk + nope + v) of kv_b.
        const KvBRows w = KvBRowsOf(kv_b, static_cast<int64_t>(h) * blk + d.nope, d.v, scratch);
        cpu::MatMulRows(w.dtype, w.data, d.kv_lora, o_lat.data_as<float>() + h * d.kv_lora, o_lat.row_stride(), T,
                        out.data_as<float>() + h * d.v, out.row_stride(), 0, d.v);
      }
    });
  });
}

}  // namespace llmrt
