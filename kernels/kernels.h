// Launch functions of the CUDA backend's device code (kernels/*.cu). The host side
// (src/backend/cuda/) validates shapes, then calls these with raw device pointers; each returns
// the launch status (cudaGetLastError), which the backend records into its status channel.
//
// Conventions: activations are float32 matrices with a row stride (`ld`, in elements); weights
// are row-major [rows, cols] of `Elem` type; index arrays are int32. Kernels that read indices
// from device memory bound-check them and report a violation through `err` (one int32 in
// device memory, see ErrorCode); they never read or write outside their buffers. This header is
// plain C++ (no CUDA syntax) so the backend's .cc files compile with the host compiler.
#ifndef LLMRT_KERNELS_KERNELS_H_
#define LLMRT_KERNELS_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace llmrt::cuda {

// Element type of a weight, a norm vector or a KV row.
enum Elem : int32_t { kElemF32 = 0, kElemBf16 = 1 };

// Device-detected failures (the first one sticks until the host reads and clears it).
enum ErrorCode : int32_t {
  kErrNone = 0,
  kErrTokenId = 1,      // Embedding: id outside [0, vocab)
  kErrRowIndex = 2,     // GatherRows: row outside the source
  kErrSlot = 3,         // KV write/export/import: slot outside the cache
  kErrPage = 4,         // attention: page id outside the cache
  kErrSelected = 5,     // sparse attention: selected position outside the context
  kErrExpert = 6,       // MoE: expert id outside the bank
};
const char* ErrorCodeName(int32_t code);

struct ConstMat {  // float32 activations, read
  const float* data;
  int64_t rows, cols, ld;
};
struct MutMat {  // float32 activations, written
  float* data;
  int64_t rows, cols, ld;
};
struct WeightRef {  // a dense weight [rows, cols], or a vector [rows]
  const void* data;
  Elem type;
  int64_t rows, cols;
};

// ---- elementwise and norms (elementwise.cu) ----
cudaError_t LaunchFill(float* p, int64_t n, float value, cudaStream_t s);
cudaError_t LaunchEmbedding(WeightRef table, const int32_t* ids, int64_t T, MutMat out, int32_t* err, cudaStream_t s);
// Rows of a vocabulary shard: out[t] = table[ids[t] - first_id] when that row is in the table,
// else zeros (another rank holds it; the ranks' rows are summed afterwards).
cudaError_t LaunchEmbeddingShard(WeightRef table, int64_t first_id, const int32_t* ids, int64_t T, MutMat out,
                                 cudaStream_t s);
// RMS norm of every `group`-wide block of each row (group == cols: the whole row).
cudaError_t LaunchRmsNorm(ConstMat x, int64_t group, WeightRef w, float eps, MutMat out, cudaStream_t s);
cudaError_t LaunchLayerNorm(ConstMat x, WeightRef w, WeightRef b, float eps, MutMat out, cudaStream_t s);
cudaError_t LaunchAdd(ConstMat a, ConstMat b, MutMat out, cudaStream_t s);
cudaError_t LaunchSiluMul(ConstMat gate, ConstMat up, MutMat out, cudaStream_t s);
cudaError_t LaunchAddBias(MutMat x, WeightRef bias, cudaStream_t s);
cudaError_t LaunchGatherRows(ConstMat x, const int32_t* rows, int64_t n, MutMat out, int32_t* err, cudaStream_t s);
cudaError_t LaunchRope(MutMat x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq, int64_t half,
                       float attention_factor, bool interleaved, const int32_t* positions, cudaStream_t s);

// ---- matmul (matmul.cu) ----
// The routed experts of a grouped GEMM: weight pointers and types per expert (device arrays).
struct ExpertTable {
  const void* const* ptrs;  // [E]
  const int32_t* types;     // [E] Elem
};
// Tiles of a grouped GEMM over rows permuted by expert (built on the device by LaunchMoePermute):
// tile i covers rows [row0[i], row1[i]) of expert expert[i]; count[0] tiles are valid.
struct TileTable {
  const int32_t* expert;
  const int32_t* row0;
  const int32_t* row1;
  const int32_t* count;
  int64_t max_tiles;
};
inline constexpr int64_t kGemmTileRows = 32;
// out [M, N] = x [M, K] w^T, float32 accumulation in k order for every output element (so a row's
// result does not depend on the other rows of the call).
cudaError_t LaunchGemm(ConstMat x, WeightRef w, MutMat out, cudaStream_t s);
// Grouped: out row r = x row (x_rows ? x_rows[r] : r) times the weight of its tile's expert
// ([N, K] each, all experts the same shape).
cudaError_t LaunchGroupedGemm(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                              TileTable tiles, MutMat out, cudaStream_t s);
// q_lat[t, h] = W_UK(h)^T q_nope[t, h] and out[t, h] = W_UV(h) o_lat[t, h] (backend.h).
cudaError_t LaunchMlaAbsorbQuery(ConstMat q, WeightRef kv_b, int64_t heads, int64_t nope, int64_t rope, int64_t v,
                                 int64_t kv_lora, MutMat q_lat, cudaStream_t s);
cudaError_t LaunchMlaProjectValue(ConstMat o_lat, WeightRef kv_b, int64_t heads, int64_t nope, int64_t v,
                                  int64_t kv_lora, MutMat out, cudaStream_t s);

// ---- paged KV cache and attention (attention.cu) ----
struct KvRef {
  uint8_t* pages;  // [num_pages, num_layers, page_size, row_bytes]
  Elem type;       // flat rows of F32 or BF16
  int64_t num_pages, num_layers, page_size, row_bytes, width;
};
struct BatchRef {
  const int32_t* token_seq;
  const int32_t* token_ctx;
  const int32_t* seq_page_start;
  const int32_t* page_ids;
  const int32_t* slot_mapping;
  int64_t num_tokens, max_ctx;
};
// Up to three row parts written side by side from column 0.
struct KvParts {
  ConstMat part[3];
  int32_t count;
};
cudaError_t LaunchKvWrite(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err, cudaStream_t s);
cudaError_t LaunchKvExportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, uint8_t* dst, int32_t* err,
                               cudaStream_t s);
// Rows of `src_type` (row_bytes src_row_bytes) into the cache, converted to its type.
cudaError_t LaunchKvImportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, const uint8_t* src,
                               Elem src_type, int64_t src_row_bytes, int32_t* err, cudaStream_t s);

// Softmax attention of each (token, head) over its paged context (or its selected positions):
// score = (q1 . row[k1_off ..] + q2 . row[k2_off ..]) * scale, out = sum prob * row[v_off .. +dv].
struct AttentionArgs {
  KvRef kv;
  int64_t layer;
  BatchRef batch;
  int64_t heads;
  int64_t kv_group;  // query heads per KV head (GQA); K/V offsets advance by head_dim per group
  // Query segment 1: q1 + t * q1_ld + h * q1_head, q1_len values, against row[k1_off + g * k_head_step ..].
  const float* q1;
  int64_t q1_ld, q1_head, q1_len, k1_off;
  // Optional segment 2 (MLA's rope part): q2 + t * q2_ld + h * q2_head, q2_len values at row[k2_off ..].
  const float* q2;
  int64_t q2_ld, q2_head, q2_len, k2_off;
  int64_t k_head_step;  // GQA: head_dim (keys of KV group g at k1_off + g * head_dim); MLA: 0
  int64_t v_off, v_head_step, dv;
  float scale;
  const int32_t* selected;  // optional [T, top_k]
  int64_t top_k;
  float* out;  // out + t * out_ld + h * dv
  int64_t out_ld;
  // Split over the KV length (FlashDecoding / FlashMLA): `splits` blocks per (token, head) each
  // take a contiguous share of the positions and write (max, sum, unnormalized output) to
  // `partial` [T * heads * splits, dv + 2]; a second kernel combines them. splits == 1 writes
  // `out` directly.
  int64_t splits = 1;
  float* partial = nullptr;
};
cudaError_t LaunchAttention(const AttentionArgs& a, int32_t* err, cudaStream_t s);

// DSA: scores [T, max_ctx] (workspace) then the top_k per token into selected [T, top_k].
cudaError_t LaunchDsaSelect(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef batch, int64_t heads,
                            int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                            int32_t* selected, int64_t selected_ld, int32_t* err, cudaStream_t s);

// ---- mixture of experts (moe.cu) ----
// noaux_tc routing from router logits [T, E] (scratch [T, E] floats for sigmoid scores).
struct RouteArgs {
  const float* logits;
  int64_t T, E, K, n_group, topk_group;
  bool norm_topk_prob;
  float routed_scaling_factor;
  const void* bias;  // optional [E]
  Elem bias_type;
  float* scratch;    // [T, E]
  int32_t* idx;
  int64_t idx_ld;
  float* weights;
  int64_t weights_ld;
};
cudaError_t LaunchMoeRoute(const RouteArgs& a, cudaStream_t s);
// Permutation of the T*K (token, slot) pairs by expert (token order within an expert): perm_token
// [T*K] (token of each permuted row), perm_pos [T*K] (permuted row of pair t*K+k), the tile table
// (arrays of tiles.max_tiles entries), and per-expert counts/offsets scratch [2 * E].
struct PermuteArgs {
  const int32_t* idx;
  int64_t idx_ld, T, K, E;
  int32_t* perm_token;
  int32_t* perm_pos;
  int32_t* counts;  // [2 * E]
  int32_t* tile_expert;
  int32_t* tile_row0;
  int32_t* tile_row1;
  int32_t* tile_count;
  int64_t max_tiles;
};
cudaError_t LaunchMoePermute(const PermuteArgs& a, int32_t* err, cudaStream_t s);
// out[t] = sum over t's slots in (expert, slot) order of weights[t, k] * y[perm_pos[t*K + k]].
cudaError_t LaunchMoeCombine(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                             ConstMat y, MutMat out, cudaStream_t s);

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_KERNELS_H_
