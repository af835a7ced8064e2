// The backend op interface: everything an architecture's forward pass may ask of a device.
//
// Contract:
//  - Tensors passed to ops live in this backend's memory (Allocate, ImportWeight, Upload).
//  - Ops are enqueued in call order on the backend's stream and may complete asynchronously;
//    Download and Synchronize wait. The CPU backend runs each op before returning.
//  - Activations are float32. Weights come in the formats of WeightFormat; matmul dispatches on
//    the format. Ops take `out` last and never alias inputs unless stated.
//  - backend knows nothing of models or sessions: ops receive dimensions and index tensors.
#ifndef LLMRT_BACKEND_BACKEND_H_
#define LLMRT_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/tensor.h"

namespace llmrt {

// How a weight matrix is stored. Each format has a matmul kernel per backend; the quantized
// ones dequantize as w = q * scale in float32 (the checkpoints' own definition).
enum class WeightFormat : uint8_t {
  kF32,   // float32 [rows, cols]
  kBF16,  // bfloat16 [rows, cols]
  // float8 e4m3fn [rows, cols], float32 scales [ceil(rows / block_rows), ceil(cols / block_cols)]
  // (DeepSeek / Kimi / GLM FP8 checkpoints: weight + weight_scale_inv, which multiplies).
  kFp8Block,
  // int4 symmetric in groups of `group` columns: bytes [rows, cols / 2], column 2j in the low
  // nibble of byte j and 2j+1 in the high one, each stored as q + 8 (compressed-tensors
  // pack-quantized, read as little-endian bytes); bfloat16 scales [rows, cols / group].
  kInt4Group,
};
const char* WeightFormatName(WeightFormat f);

// A weight matrix [rows, cols] (or a vector [rows] with cols == 1) in backend memory.
struct Weight {
  WeightFormat format = WeightFormat::kBF16;
  Tensor data;
  int64_t rows = 0;
  int64_t cols = 0;
  Tensor scales;           // kFp8Block, kInt4Group
  int64_t block_rows = 0;  // kFp8Block
  int64_t block_cols = 0;  // kFp8Block
  int64_t group = 0;       // kInt4Group
  bool defined() const { return data.defined() && rows > 0; }
  bool quantized() const { return format == WeightFormat::kFp8Block || format == WeightFormat::kInt4Group; }
};

// Per-step metadata for paged attention, uploaded once per forward pass. For token t of the
// batch: token_seq[t] is its sequence, token_ctx[t] the number of cached positions it attends
// to (its position + 1, causal). Sequence s owns pages
// page_ids[seq_page_start[s] .. seq_page_start[s+1]), position p of s lives in page
// page_ids[seq_page_start[s] + p / page_size] at row p % page_size.
struct AttentionBatch {
  Tensor token_seq;       // I32 [T]
  Tensor token_ctx;       // I32 [T]
  Tensor seq_page_start;  // I32 [S + 1]
  Tensor page_ids;        // I32 [total pages]
  Tensor slot_mapping;    // I32 [T]: page * page_size + row where token t's K/V is written
  Tensor seq_first_token; // I32 [S]: batch row of each sequence's first token (its rows are contiguous)
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_ctx = 0;
};

// The paged KV cache: [num_pages, num_layers, page_size, width] in `dtype` (F32 or BF16).
// FP8 caches store fp8_e4m3(x / scale) with one float32 scale per layer (scales[layer]); a
// scale of 0 means "not calibrated yet": the first KvWrite of the layer sets it from the largest
// magnitude it writes (latent and rope parts together), with 2x headroom.
//
// The tiled FP8 codec (KvRowLayout, `tiled` set; pages are U8 rows of row_bytes): values in FP8
// e4m3 with one float32 scale per tile (the tile's largest magnitude / 448, per token), except
// segments kept in BF16 (MLA's rope key). Row bytes: each segment's codes in order, then every
// tile scale.
//
// Phase policy of the FP8 codecs: a forward pass attends over the positions it writes itself
// (a prefill chunk, a decoding token's own position) in BF16, from `fresh` (BF16 [max tokens,
// width], rewritten by each layer's KvWrite), and over earlier positions in the stored codec.
struct KvSegment {
  int64_t start = 0, count = 0;  // values [start, start + count) of the row
  bool bf16 = false;             // kept in BF16; else FP8 tiles
  int64_t tile = 128;            // FP8: values per scale
  int64_t byte_offset = 0;       // where the segment's codes start in the row
  int64_t first_scale = 0;       // FP8: index of its first tile scale
};
struct KvRowLayout {
  int64_t width = 0;      // values per row
  int64_t row_bytes = 0;  // codes plus scales
  int64_t scale_offset = 0;  // byte offset of the float32 scales
  std::vector<KvSegment> segments;
};

struct KvCacheView {
  Tensor pages;
  const KvRowLayout* tiled = nullptr;  // the tiled FP8 codec, else null
  int64_t row_bytes = 0;               // bytes of one row (width * dtype size unless tiled)
  Tensor scales;  // F32 [num_layers], FP8 caches only
  Tensor fresh;   // BF16 [max tokens per pass, width], FP8 caches only
  int64_t fresh_rows = 0;  // 0: no fresh rows (BF16 and F32 caches read everything from pages)
  int64_t num_pages = 0;
  int64_t num_layers = 0;
  int64_t page_size = 0;
  int64_t width = 0;
};

// MLA dimensions for the absorbed (latent-space) attention of DeepSeek-V3-style models.
struct MlaDims {
  int64_t heads = 0;
  int64_t nope = 0;      // qk_nope_head_dim
  int64_t rope = 0;      // qk_rope_head_dim
  int64_t v = 0;         // v_head_dim
  int64_t kv_lora = 0;   // kv_lora_rank
};

// noaux_tc router parameters (DeepSeek-V3, Kimi K2, GLM-4.5+).
struct RouterParams {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// One routed expert: SwiGLU down(silu(gate(x)) * up(x)).
struct ExpertWeights {
  Weight gate;  // [inter, hidden]
  Weight up;    // [inter, hidden]
  Weight down;  // [hidden, inter]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory ----
  virtual absl::StatusOr<Tensor> Allocate(DType dtype, std::initializer_list<int64_t> shape) = 0;
  // Makes host bytes (kept alive by `keepalive`, e.g. an mmap) usable as a backend tensor. The
  // CPU backend wraps them without a copy; device backends upload.
  virtual absl::StatusOr<Tensor> ImportHost(std::shared_ptr<Storage> keepalive, const void* data,
                                            DType dtype, const int64_t* shape, int rank) = 0;
  virtual void Upload(const void* src, size_t bytes, const Tensor& dst) = 0;
  virtual void Download(const Tensor& src, void* dst, size_t bytes) = 0;
  virtual void Fill(const Tensor& t, float value) = 0;
  virtual void Synchronize() = 0;

  // ---- elementwise and norms ----
  // out[t] = table[ids[t]] as float32. table [vocab, hidden]; ids I32 [T]; out [T, hidden].
  virtual void Embedding(const Weight& table, const Tensor& ids, const Tensor& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * w, per row, in float32. x may be a column view; out may be x.
  virtual void RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) = 0;
  // out = (x - mean(x)) * rsqrt(var(x) + eps) * w + b, per row, in float32 (nn.LayerNorm).
  virtual void LayerNorm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& out) = 0;
  // out = a + b (out may alias a or b).
  virtual void Add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = silu(gate) * up.
  virtual void SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // x[t] += bias for every row t (bias [cols]).
  virtual void AddBias(const Tensor& x, const Weight& bias) = 0;
  // out[i] = x[rows[i]]. rows I32 [S].
  virtual void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;

  // ---- matmul ----
  // out [T, rows] = x [T, cols] * w^T. x may be a column view.
  virtual void MatMul(const Tensor& x, const Weight& w, const Tensor& out) = 0;

  // ---- rotary embedding ----
  // Rotates, in place, dims [offset, offset + inv_freq.size()*2) of each of `heads` heads of
  // width head_dim in every row of x [T, heads * head_dim] (x may be a column view), by angle
  // positions[t] * inv_freq[i], with cos/sin scaled by attention_factor. interleaved: pairs
  // (2i, 2i+1) (GPT-J / DeepSeek layout); else (i, i + half) (NeoX rotate_half). positions I32 [T].
  virtual void Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset,
                    const std::vector<float>& inv_freq, float attention_factor, bool interleaved,
                    const Tensor& positions) = 0;

  // ---- paged KV cache ----
  // Writes, for every token t, parts[0][t], parts[1][t], ... side by side from column 0 of the
  // cache row slot_mapping[t] of `layer`, converting to the cache dtype: MLA stores (latent,
  // k_rope[, indexer key]), GQA (keys, values). The parts' widths sum to at most cache.width.
  virtual void KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
                       const AttentionBatch& batch) = 0;

  // Copies the codec bytes of the cache rows `slots` of `layer` to host memory `dst`, row after
  // row (KV export).
  virtual void KvExportRows(const KvCacheView& cache, int64_t layer, const std::vector<int32_t>& slots,
                            uint8_t* dst) = 0;
  // Writes rows given as host bytes of codec `src_dtype` (F32, BF16, or FP8 with `src_scale`)
  // into the cache rows `slots` of `layer`, converting to the cache's codec (KV import). An FP8
  // layer without a scale yet takes src_scale from an FP8 source, else calibrates on the rows.
  virtual void KvImportRows(const KvCacheView& cache, int64_t layer, const std::vector<int32_t>& slots,
                            const uint8_t* src, DType src_dtype, float src_scale, const KvRowLayout* src_tiled) = 0;

  // ---- grouped-query attention (GLM-4.5) ----
  // Cache rows hold [K of kv_heads heads | V of kv_heads heads], head_dim each. Query head h
  // uses KV head h / (heads / kv_heads). out[t,h] = softmax(q[t,h].K * scale) V over the causal
  // context of t, softmax in float32. q, out [T, heads * head_dim].
  virtual void GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer,
                            const AttentionBatch& batch, int64_t heads, int64_t kv_heads, int64_t head_dim,
                            float scale, const Tensor& out) = 0;

  // ---- MLA attention over the paged latent cache ----
  // q_lat [T, heads, kv_lora] = per head W_UK^T q_nope, with W_UK the first `nope` rows of
  // each head's block of kv_b [heads*(nope+v), kv_lora]. q [T, heads*(nope+rope)].
  virtual void MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d,
                              const Tensor& q_lat) = 0;
  // Absorbed attention: score(t, p) = (q_lat[t,h] . c_p + q_rope[t,h] . kr_p) * scale over the
  // causal context of t, softmax in float32, out_lat[t,h] = sum_p prob * c_p. Cache rows start
  // with [c (kv_lora) | kr (rope)]. With `selected` non-null (I32 [T, k], from DsaSelect), token
  // t attends only to the positions listed in row t (up to the first -1): sparse attention.
  virtual void MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache,
                            int64_t layer, const AttentionBatch& batch, const MlaDims& d,
                            float scale, const Tensor* selected, const Tensor& out_lat) = 0;

  // ---- DeepSeek Sparse Attention indexer (GLM-5) ----
  // For every token t and cached position p of its causal context, the index score
  //   I(t, p) = sum_h w[t,h] * relu(q[t,h] . k_p * key_scale)
  // where k_p is the head_dim-wide indexer key at column key_offset of p's cache row. Writes the
  // positions of the top_k largest scores (ties to the earlier position) to selected [T, top_k]
  // in ascending order, padded with -1 when the context has fewer than top_k positions.
  // q [T, heads * head_dim], w [T, heads].
  virtual void DsaSelect(const Tensor& q, const Tensor& w, const KvCacheView& cache, int64_t layer,
                         const AttentionBatch& batch, int64_t heads, int64_t head_dim, int64_t key_offset,
                         float key_scale, int64_t top_k, const Tensor& selected) = 0;
  // out [T, heads*v] = per head W_UV o_lat[t,h], W_UV the last v rows of each head's kv_b block.
  virtual void MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d,
                               const Tensor& out) = 0;

  // ---- mixture of experts ----
  // noaux_tc routing: logits = x gate^T in float32, s = sigmoid, choice = s + bias, group
  // masking, top-k on choice, weights s[idx] (normalized, scaled). idx I32 [T, k], w F32 [T, k].
  virtual void MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias,
                        const RouterParams& p, const Tensor& idx, const Tensor& weights) = 0;
  // out [T, hidden] = sum_k weights[t,k] * expert_{idx[t,k]}(x[t]); only selected experts run.
  virtual void MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights,
                          const std::vector<ExpertWeights>& experts, const Tensor& out) = 0;
};

struct CpuBackendOptions {
  int num_threads = 0;  // 0 = one per core
};
std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace llmrt

#endif  // LLMRT_BACKEND_BACKEND_H_
