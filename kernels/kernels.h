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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

namespace llmrt::cuda {

// Element type of a weight, a norm vector or a KV row. kElemFp8E4M3: e4m3 codes (weights with
// block scales, flat FP8 KV rows with the layer's scale); kElemInt4: packed INT4 weights with
// group scales (weights only).
enum Elem : int32_t { kElemF32 = 0, kElemBf16 = 1, kElemFp8E4M3 = 2, kElemInt4 = 3 };

// Device-detected failures (the first one sticks until the host reads and clears it).
enum ErrorCode : int32_t {
  kErrNone = 0,
  kErrTokenId = 1,      // Embedding: id outside [0, vocab)
  kErrRowIndex = 2,     // GatherRows: row outside the source
  kErrSlot = 3,         // KV write/export/import: slot outside the cache
  kErrPage = 4,         // attention: page id outside the cache
  kErrSelected = 5,     // sparse attention: selected position outside the context
  kErrExpert = 6,       // MoE: expert id outside the bank
  kErrKernel = 7,       // a kernel ran without the instructions or shared memory alignment it needs
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
// A weight [rows, cols], or a vector [rows] (F32 / BF16 only). Quantized weights:
//   kElemFp8E4M3: codes [rows, cols] bytes, float32 scales [ceil(rows / block_rows),
//                 ceil(cols / block_cols)]; w = fp8(code) * scale.
//   kElemInt4:    codes [rows, cols / 2] bytes (column 2j in the low nibble of byte j, stored
//                 q + 8: the checkpoint's pack-quantized words read as bytes), bfloat16 scales
//                 [rows, cols / group]; w = q * scale.
struct WeightRef {
  const void* data;
  Elem type;
  int64_t rows, cols;
  const void* scales = nullptr;
  int64_t group = 0;
  int64_t block_rows = 0, block_cols = 0;
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
// The BF16 activation policy: x rounded to bfloat16 (nearest even, as llmrt::F32ToBf16), as
// codes into a contiguous [x.rows, x.cols] buffer, or as float32 values into `out` (may be x).
cudaError_t LaunchRoundToBf16(ConstMat x, uint16_t* out, cudaStream_t s);
cudaError_t LaunchRoundToBf16Values(ConstMat x, MutMat out, cudaStream_t s);
cudaError_t LaunchRope(MutMat x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq, int64_t half,
                       float attention_factor, bool interleaved, const int32_t* positions, cudaStream_t s);

// ---- sampling (sampling.cu) ----
// The parameter words of one row (src/backend/sampling.h kSamplingWords): temperature, top_k,
// top_p, min_p as their bits, then the draw (a double) as two words, low first.
constexpr int64_t kSamplingParamWords = 6;
// Rows that draw are sorted this many at a time (the scratch holds them).
constexpr int64_t kSampleRowsPerPass = 16;
struct SampleArgs {
  ConstMat logits;             // [R, V]
  const int32_t* params;       // [R * kSamplingParamWords]
  const int32_t* random_rows;  // [num_random], the rows whose parameters draw
  int64_t num_random;
  int32_t* ids;                // [R]
};
// Device scratch LaunchSampleTokens needs for `random_rows` drawing rows of `vocab` logits.
size_t SamplingScratchBytes(int64_t random_rows, int64_t vocab);
cudaError_t LaunchSampleTokens(const SampleArgs& a, void* scratch, cudaStream_t s);

// ---- matmul (matmul.cu) ----
// The routed experts of a grouped GEMM: weight pointers and types per expert (device arrays).
// The routed experts of one projection of a grouped GEMM: each expert's weight (device array,
// any format, experts may differ), and whether every expert takes the GEMV kernel in one format
// (gemv_bits 4: all INT4, 8: all FP8, 16: all BF16, 32: all F32, each GemvApplies; 0: the tiled
// kernel).
struct ExpertTable {
  const WeightRef* weights;  // [E]
  int32_t gemv_bits;
};
// Tiles of a grouped GEMM over rows permuted by expert (built on the device by LaunchMoePermute):
// tile i covers rows [row0[i], row1[i]) of expert expert[i]; count[0] tiles are valid. A tile
// holds at most max_rows rows (the tokens of the call, where a token meets an expert once; the
// GEMV takes the tiles of a token listing an expert twice in runs of at most x's rows), which
// picks the GEMV's one-row instance at batch 1, and at most tile_rows (PermuteArgs::tile_rows): 32
// (kGemmTileRows) for every grouped kernel, 64 or 128 (kGemmWideTileRows) for
// LaunchGroupedGemmMma and LaunchGroupedGemmWgmma alone (the others refuse such tables).
inline constexpr int64_t kGemmTileRows = 32;
inline constexpr int64_t kGemmWideTileRows = 128;
// The rows a tile of LaunchGroupedGemmMma takes for P routed pairs over E experts: by the rows
// an expert gets on average, ceil(P / min(E, P)): 32 up to 32, 64 up to 64, else 128; `forced`
// (32, 64 or 128; any other value: by the average) instead; FP8 experts (`fp8`) at most 64.
inline int64_t GroupedMmaTileRows(int64_t P, int64_t E, int64_t forced, bool fp8) {
  const int64_t active = E < P ? E : P, per_expert = active > 0 ? (P + active - 1) / active : 0;
  const bool valid = forced == 32 || forced == 64 || forced == kGemmWideTileRows;  // (else by the average)
  const int64_t chosen = valid ? forced : per_expert > 64 ? 128 : per_expert > 32 ? 64 : 32;
  const int64_t most = fp8 ? 64 : kGemmWideTileRows;
  return chosen < most ? chosen : most;
}
struct TileTable {
  const int32_t* expert;
  const int32_t* row0;
  const int32_t* row1;
  const int32_t* count;
  int64_t max_tiles;
  int64_t max_rows = 0;  // 0: unknown (up to tile_rows)
  int64_t tile_rows = kGemmTileRows;
};
// out [M, N] = x [M, K] w^T with float32 accumulation; a row's result does not depend on the
// other rows of the call. Weights whose rows are 16-byte aligned (INT4: group a multiple of 32;
// FP8: cols and block_cols multiples of 16; BF16 / F32: cols a multiple of 16): the GEMV kernel
// (quant_matmul.cu); other shapes: the tiled kernel, one sum in k order per element,
// dequantizing each element as its scalar reference does.
cudaError_t LaunchGemm(ConstMat x, WeightRef w, MutMat out, cudaStream_t s);
// The FP8 activation policy's per-row scales for the GEMV (x then holds e4m3 values): the scale
// of x row r for column block b of the weight is data[b * ld + r]. data null: none.
struct ActScales {
  const float* data = nullptr;
  int64_t ld = 0;
};
// Grouped: out row r = x row (x_rows ? x_rows[r] : r) times the weight of its tile's expert
// ([N, K] each, all experts the same shape; experts.gemv_bits picks the kernel). Activation
// scales only with gemv_bits 8 (cudaErrorInvalidValue otherwise).
cudaError_t LaunchGroupedGemm(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                              TileTable tiles, MutMat out, cudaStream_t s, ActScales act = {});
// The same on the tensor cores (moe.cu), x as bfloat16 codes (rows of ldx codes, 16-byte
// aligned; LaunchRoundToBf16 makes them): the bf16-rounded activations (the BF16-rounding
// activation policies) with all-BF16 experts (gemv_bits 16, K a multiple of 8, no act), or e4m3
// values with their scales (the FP8 policy) with all-FP8 experts (gemv_bits 8, K a multiple of 16,
// every expert's block_cols a multiple of 32). Float32 sums of exact products (per column block
// for FP8, folded with the scales); cudaErrorInvalidValue otherwise. Tiles of 32, 64 or 128 rows
// (tiles.tile_rows; FP8 at most 64) give every row the same bits.
cudaError_t LaunchGroupedGemmMma(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts, int64_t N,
                                 int64_t K, TileTable tiles, MutMat out, cudaStream_t s, ActScales act = {});
// The same on Hopper's warpgroup MMAs (moe.cu, body in moe_wg_kernels.cuh), for the same two
// forms (BF16 experts and codes; FP8 experts with every expert's block_cols a multiple of 64,
// e4m3 codes with their scales): tiles of up to 64 rows (tile_rows 32 or 64) by 256 columns, or
// of 128 rows by 128 columns (FP8 included). Float32 sums of exact products (per column block
// for FP8, folded with the scales) in the hardware's order within each m64n128k16, not
// necessarily the mma.sync kernel's bits; every tile size gives every row the same bits. Runs
// only on a device of compute capability 9.0 and where GroupedGemmWgmmaBuilt() (the build has
// the sm_90a machine code; else cudaErrorNotSupported); a block that finds the instructions
// missing anyway, or its shared memory not 1024-byte aligned, raises kErrKernel in *err (and
// writes NaN). The launcher cannot see the experts' block_cols (a device table): the caller
// checks them.
bool GroupedGemmWgmmaBuilt();
cudaError_t LaunchGroupedGemmWgmma(const uint16_t* x, int64_t ldx, const int32_t* x_rows, ExpertTable experts,
                                   int64_t N, int64_t K, TileTable tiles, MutMat out, int32_t* err, cudaStream_t s,
                                   ActScales act = {});
// The dequantizing GEMV path of quantized weights (quant_matmul.cu; LaunchGemm and
// LaunchGroupedGemm dispatch to it): whether it takes `w` (its rows are 16-byte aligned and a
// 16-byte load of codes shares one scale), and its launches.
inline bool QuantGemvApplies(const WeightRef& w) {
  if (w.type == kElemInt4) return w.group > 0 && w.group % 32 == 0 && w.cols % w.group == 0;
  if (w.type == kElemFp8E4M3) {
    return w.block_rows > 0 && w.block_cols > 0 && w.cols % 16 == 0 && w.block_cols % 16 == 0;
  }
  return false;
}
// Dense rows (BF16, F32) take the same kernel when their rows are 16-byte aligned and split into
// whole 16-column steps: a row's sum is then the same tree of lane partials whatever the batch,
// for every T (LaunchGemm uses it for all of them, so rows do not depend on the batch).
inline bool DenseGemvApplies(const WeightRef& w) {
  return (w.type == kElemBf16 || w.type == kElemF32) && w.cols % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}
inline bool GemvApplies(const WeightRef& w) { return QuantGemvApplies(w) || DenseGemvApplies(w); }
// Activation scales: FP8 weights only (cudaErrorInvalidValue otherwise).
cudaError_t LaunchQuantGemv(ConstMat x, WeightRef w, MutMat out, cudaStream_t s, ActScales act = {});
cudaError_t LaunchGroupedQuantGemv(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                                   TileTable tiles, MutMat out, cudaStream_t s, ActScales act = {});
// INT4 and FP8 block-scaled weights on the tensor cores (quant_matmul.cu, body in
// quant_mma_kernels.cuh): INT4 in groups of whole 32-column steps, FP8 with block_cols a multiple
// of 32 and K a multiple of 32. The activations are first written as two bfloat16 parts each into
// `prepared` (QuantPreparedBytes of x's rows and columns, 16-byte aligned), then every token is
// multiplied with bf16 MMAs and float32 sums (within the float32 bound widened by 2^-16 per
// product; batch-invariant). Grouped: x_rows index x's rows, as LaunchGroupedGemm's do, and
// every expert takes the kernel (gemv_bits 4 or 8); `prepare` false reuses what an earlier call
// wrote into `prepared` from the same x for the same format (the MoE's gate and up projections).
inline bool QuantMmaApplies(const WeightRef& w) {
  if (w.type == kElemInt4) return w.group > 0 && w.group % 32 == 0 && w.cols % w.group == 0;
  if (w.type == kElemFp8E4M3) return w.block_rows > 0 && w.block_cols > 0 && w.block_cols % 32 == 0 && w.cols % 32 == 0;
  return false;
}
inline size_t QuantPreparedBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows) * static_cast<size_t>(cols) * 4;
}
cudaError_t LaunchQuantMma(ConstMat x, WeightRef w, void* prepared, MutMat out, cudaStream_t s);
// max_expert_rows: the most rows any expert can get (the pass's tokens; 0: not known); up to 8,
// an instance with one fragment's registers runs.
cudaError_t LaunchGroupedQuantMma(ConstMat x, const int32_t* x_rows, ExpertTable experts, int64_t N, int64_t K,
                                  TileTable tiles, void* prepared, MutMat out, cudaStream_t s, bool prepare = true,
                                  int64_t max_expert_rows = 0);

// ---- the FP8 activation policy's quantization (fp8_act.cu) ----
// Each row of x, per block of block_cols columns, to e4m3 codes under one float32 scale, exactly
// as cpu::QuantizeActivationsFp8 computes them (scale = amax / 448, 1 where that is zero, a
// float32 denormal or NaN; code = e4m3(x * (1 / scale)), nearest even, saturating). The scales
// always; each of the other outputs ([x.rows, x.cols] contiguous) when not null.
struct Fp8ActOut {
  float* scales = nullptr;         // row t's scale of block b at b * scales_ld + t
  int64_t scales_ld = 0;           // >= x.rows
  uint8_t* codes = nullptr;        // the codes (cuBLASLt's operand)
  float* values = nullptr;         // the codes' values, unscaled (the GEMV's, with ActScales)
  float* dequantized = nullptr;    // value * scale, one float32 rounding (the tiled kernel's)
};
cudaError_t LaunchQuantizeFp8Act(ConstMat x, int64_t block_cols, Fp8ActOut out, cudaStream_t s);
// q_lat[t, h] = W_UK(h)^T q_nope[t, h] and out[t, h] = W_UV(h) o_lat[t, h] (backend.h).
cudaError_t LaunchMlaAbsorbQuery(ConstMat q, WeightRef kv_b, int64_t heads, int64_t nope, int64_t rope, int64_t v,
                                 int64_t kv_lora, MutMat q_lat, cudaStream_t s);
cudaError_t LaunchMlaProjectValue(ConstMat o_lat, WeightRef kv_b, int64_t heads, int64_t nope, int64_t v,
                                  int64_t kv_lora, MutMat out, cudaStream_t s);

// ---- paged KV cache and attention (attention.cu) ----
// One segment of a tiled FP8 row (src/quant/kv_codec.h KvSegment).
struct KvSegRef {
  int64_t start, count, tile, byte_offset, first_scale;
  int32_t bf16;
};
inline constexpr int kMaxKvSegments = 4;
// A row layout: flat rows of `type` (F32, BF16, FP8 with the layer scale), or, when nseg > 0,
// mixed rows (the tiled FP8 codec: segments of BF16 values or FP8 tiles, float32 tile scales from
// scale_offset).
struct KvRowRef {
  Elem type;
  int32_t nseg;
  KvSegRef seg[kMaxKvSegments];
  int64_t scale_offset, row_bytes, width;
};
struct KvRef {
  uint8_t* pages;  // [num_pages, num_layers, page_size, row_bytes]
  Elem type;       // flat rows: F32, BF16 or FP8 (mixed rows: see `row`)
  int64_t num_pages, num_layers, page_size, row_bytes, width;
  KvRowRef row;
  const float* layer_scales = nullptr;  // device [num_layers]: flat FP8
  // The phase policy's BF16 rows of this pass (KvCacheView::fresh): [fresh_rows, width].
  uint16_t* fresh = nullptr;
  int64_t fresh_rows = 0;
};
struct BatchRef {
  const int32_t* token_seq;
  const int32_t* token_ctx;
  const int32_t* seq_page_start;
  const int32_t* page_ids;
  const int32_t* slot_mapping;
  int64_t num_tokens, max_ctx;
  const int32_t* seq_first_token = nullptr;  // needed with fresh rows
};
// Up to three row parts written side by side from column 0.
struct KvParts {
  ConstMat part[3];
  int32_t count;
};
// Encodes each token's parts (zeros after them) into its cache row by the cache's codec, and,
// with fresh rows, writes their BF16 values to fresh row t.
cudaError_t LaunchKvWrite(KvRef kv, int64_t layer, KvParts parts, BatchRef batch, int32_t* err, cudaStream_t s);
// Flat FP8: layer_scales[layer] = (largest magnitude of the parts' values) * 2 / 448 (1 when
// every value is 0), the CPU codec's CalibratedScale.
cudaError_t LaunchKvCalibrate(KvRef kv, int64_t layer, KvParts parts, cudaStream_t s);
cudaError_t LaunchKvExportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, uint8_t* dst, int32_t* err,
                               cudaStream_t s);
// Rows of layout `src` (flat FP8 at src_scale) into the cache, converted to its codec; rows of
// the cache's own codec (flat FP8: at the layer's scale) are copied as they are (same_codec).
cudaError_t LaunchKvImportRows(KvRef kv, int64_t layer, const int32_t* slots, int64_t n, const uint8_t* src,
                               KvRowRef src_row, float src_scale, bool same_codec, int32_t* err, cudaStream_t s);

// ---- MLA in expanded form (mla_expanded.cu) ----
// A pass that brings many tokens of each sequence (a prefill chunk) attends with keys and values
// expanded per head, transformers' own (non-absorbed) form: k_nope = W_UK c_p and v = W_UV c_p
// for every context position p once, then attention with heads of nope + rope and v columns,
// about a third of the absorbed form's multiply-adds per (token, position) for Kimi K2 (320
// against 1,088 a head). Three steps:
//   1. LaunchMlaGatherLatent: sequence s's context positions p < ctx_s (ctx_s: its last token's
//      context) to row s * ctx_stride + p of `latent` (bfloat16 codes [S * ctx_stride, kv_lora])
//      and `rope_keys` (bfloat16 codes [.., rope]), decoded from the cache row or the pass's
//      fresh row as the attention kernels read them, then rounded to bfloat16 (exact for BF16
//      rows and the rope key, which quantizing codecs keep in BF16); rows past ctx_s zero;
//   2. the backend's GEMM: kvx [rows, heads * (nope + v)] = latent kv_b^T, float32 sums rounded
//      to bfloat16 codes (cuBLASLt's bfloat16 output);
//   3. LaunchMlaExpandedAttention: blocks of 64 query tokens of one sequence and one head on
//      the tensor cores (bf16 MMA, float32 accumulation, FlashAttention-2's online softmax over
//      chunks of 64 positions, causal by each token's context, the next chunk's keys and values
//      copied while one is computed); out [T, heads * v] float32.
// The query and the probabilities are rounded to bfloat16 (FlashAttention's numerics).
// (PlanMlaExpanded, below, says which head shapes an instance takes.)
struct MlaExpandedArgs {
  BatchRef batch;  // seq_first_token needed
  int64_t num_seqs;
  int64_t heads, nope, rope, v;
  const float* q;  // [T, q_ld]: head h's nope + rope values at h * (nope + rope), rope part roped
  int64_t q_ld;
  // [S * ctx_stride, kvx_ld] bfloat16: head h's keys (nope of them) at columns
  // (h / group) * k_head_step, its values at v_off + (h / group) * v_head_step. MLA's expansion:
  // k_nope then v at h * (nope + v) (group 1, both steps nope + v, v_off nope); GQA's cache rows
  // (LaunchGqaFlashAttention): [K of kv heads | V of kv heads], group heads / kv_heads.
  const uint16_t* kvx;
  int64_t kvx_ld;
  // (-1: unset, which the launch refuses.)
  int64_t group = 1, k_head_step = -1, v_off = -1, v_head_step = -1;
  // > 0: only the sequences that bring at least this many tokens (the others' tokens are left
  // to the token-by-token kernel, AttentionArgs::skip_seq_tokens), the q-th of them reading the
  // rows from q * ctx_stride (LaunchMlaGatherLatent with the same minimum).
  int64_t min_seq_tokens = 0;
  const uint16_t* rope_keys;  // [S * ctx_stride, rope] bfloat16
  int64_t ctx_stride;
  float scale;
  float* out;  // [T, out_ld]: head h's v values at h * v
  int64_t out_ld;
  int64_t max_shared_bytes = 0;  // the device's opt-in limit per block (0: asked at launch)
};
// The kernel instance for a head shape: nope, rope and v multiples of 8; heads of nope + rope
// <= 192 and v <= 128 (DeepSeek-V3 / Kimi K2: 128 + 64 and 128) keep the query's fragments in
// registers, 4 warps and 64 query tokens a block; wider ones up to 256 and 256 (GLM-5: 192 + 64
// and 256) read them from shared memory every chunk, 8 warps and 128 tokens a block. False where
// none takes the shape. The launch needs shared_bytes of dynamic shared memory (the host checks
// the device's limit).
struct MlaExpandedPlan {
  int32_t qk = 0, dv = 0, warps = 0;
  bool query_in_registers = false;
  int64_t rows = 0;  // query tokens a block
  int64_t shared_bytes = 0;
};
bool PlanMlaExpanded(int64_t nope, int64_t rope, int64_t v, MlaExpandedPlan* plan);
// (min_seq_tokens > 0: only the `gathered` sequences that bring at least that many tokens, the
// q-th of them at rows q * ctx_stride: MlaExpandedArgs::min_seq_tokens.)
cudaError_t LaunchMlaGatherLatent(KvRef kv, int64_t layer, BatchRef batch, int64_t num_seqs, int64_t kv_lora,
                                  int64_t rope, int64_t ctx_stride, uint16_t* latent, uint16_t* rope_keys, int32_t* err,
                                  cudaStream_t s, int64_t min_seq_tokens = 0, int64_t gathered = -1);
cudaError_t LaunchMlaExpandedAttention(const MlaExpandedArgs& a, cudaStream_t s);

// Which sequences of a prefill pass take the expanded form (CudaBackend::MlaExpandedAttention):
// those that bring at least `threshold` tokens (0: none), `taken` of them, their contexts'
// latent rows gathered at `stride` (the longest of their contexts rounded up to 256).
struct MlaExpandedChoice {
  int64_t threshold = 0, taken = 0, stride = 0;
};
// From each sequence's tokens and context (its last token's) and the heads' dimensions. mode
// N >= 1: the sequences that bring at least N tokens. mode -1 (BackendOptions::
// kMlaExpandedByCount): the threshold whose multiply-adds by count, per head, are fewest, or
// none. A sequence of n tokens ending at context c has pairs = n c - n (n - 1) / 2 (token,
// position) pairs; absorbed, it costs pairs (2 kv_lora + rope) plus n kv_lora (nope + v) (the
// query's absorption and the value's projection); expanded, pairs (nope + rope + v), and the
// taken sequences together taken * stride * kv_lora * (nope + v) (each gathered row's
// expansion). No choice takes more than max_rows gathered rows.
inline MlaExpandedChoice ChooseMlaExpanded(const int32_t* seq_tokens, const int32_t* seq_ctx, int64_t num_seqs,
                                           int64_t kv_lora, int64_t nope, int64_t rope, int64_t v, int64_t mode,
                                           int64_t max_rows) {
  MlaExpandedChoice best;
  const auto stride_of = [](int64_t ctx) { return (ctx + 255) / 256 * 256; };
  if (num_seqs <= 0 || mode == 0 || mode < -1) return best;
  if (mode >= 1) {
    int64_t taken = 0, ctx = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      if (seq_tokens[s] < mode) continue;
      ++taken;
      ctx = std::max<int64_t>(ctx, seq_ctx[s]);
    }
    if (taken == 0 || ctx <= 0 || taken * stride_of(ctx) > max_rows) return best;
    return {mode, taken, stride_of(ctx)};
  }
  const auto pairs = [&](int64_t s) {
    const double n = seq_tokens[s], c = std::max<double>(seq_ctx[s], n);
    return n * c - n * (n - 1) / 2;
  };
  const double expand = static_cast<double>(kv_lora) * static_cast<double>(nope + v);
  const auto absorbed = [&](int64_t s) {
    return pairs(s) * static_cast<double>(2 * kv_lora + rope) + static_cast<double>(seq_tokens[s]) * expand;
  };
  std::vector<int64_t> order(static_cast<size_t>(num_seqs));
  double all_absorbed = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    order[s] = s;
    all_absorbed += absorbed(s);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return seq_tokens[a] > seq_tokens[b]; });
  double best_cost = all_absorbed, taken_absorbed = 0, taken_attention = 0;
  int64_t ctx = 0;
  for (int64_t i = 0; i < num_seqs; ++i) {
    const int64_t s = order[i];
    if (seq_tokens[s] <= 0) break;
    ctx = std::max<int64_t>(ctx, seq_ctx[s]);
    taken_absorbed += absorbed(s);
    taken_attention += pairs(s) * static_cast<double>(nope + rope + v);
    // A threshold takes every sequence with as many tokens: evaluated after the last of them.
    if (i + 1 < num_seqs && seq_tokens[order[i + 1]] == seq_tokens[s]) continue;
    if (ctx <= 0) continue;
    const int64_t rows = (i + 1) * stride_of(ctx);
    if (rows > max_rows) break;  // (more sequences only add rows)
    const double cost = static_cast<double>(rows) * expand + taken_attention + (all_absorbed - taken_absorbed);
    if (cost < best_cost) {
      best_cost = cost;
      best = {seq_tokens[s], i + 1, stride_of(ctx)};
    }
  }
  return best;
}

// Which attention kernel runs (BackendOptions::attention).
//   kTensorCore: heads that share a K/V row in blocks of 16 on the tensor cores (bf16 MMA,
//     float32 accumulation) with the query and the probabilities carried as two bfloat16 parts
//     each (16 significant bits: a relative error of at most 2^-16 per product past float32's);
//     BF16, flat FP8 and tiled FP8 rows (codes, exact in bfloat16, times their scales after the
//     products).
//   kTensorCoreBf16: the same kernel with one bfloat16 part (FlashMLA's numerics; 2^-8).
//   kWgmma: MLA layers with a latent of 512 in BF16 or flat FP8 rows on Hopper's warpgroup MMAs (sm_90a):
//     blocks of 64 heads, so each latent row is read once per 64 heads; one bfloat16 part as
//     kTensorCoreBf16, which runs every case it does not take.
//   kScalar: one block per (token, head) on the CUDA cores in float32; what every case the
//     tensor-core kernel does not take runs (F32 rows, tiles that split a 16-column step, dv
//     above 512, rows wider than its shared memory).
enum class AttentionKernel : int32_t { kTensorCore = 0, kTensorCoreBf16 = 1, kScalar = 2, kWgmma = 3 };

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
  // `partial` [GridTokens * heads * splits, dv + 2] (indexed by the grid's (token, head): the
  // listed position with listed runs); a second kernel combines them. splits == 1 writes `out`
  // directly.
  int64_t splits = 1;
  float* partial = nullptr;
  AttentionKernel kernel = AttentionKernel::kTensorCore;
  int64_t max_shared_bytes = 0;  // the device's opt-in limit per block (0: the kernels' own cap)
  // Shared memory per multiprocessor and the part the driver reserves per block (0: unknown);
  // with them the tensor-core kernel's plan counts the blocks a multiprocessor holds.
  int64_t sm_shared_bytes = 0, reserved_shared_bytes = 0;
  // The tensor-core kernel's row loads: 1 loads each chunk of rows after the previous one is
  // done, 2 loads the next chunk while this one is computed (two buffers); 0 (auto) takes 2
  // where the second buffer keeps as many blocks on a multiprocessor.
  int32_t stages = 0;
  // The tensor-core kernel's query fragments in registers where they fit (TcPlan::qreg); false
  // reads them from shared memory per chunk (for comparisons and tests).
  bool query_in_registers = true;
  // Head tiles of 16 per tensor-core block: 2 puts two tiles that share their rows (MLA's heads)
  // in one block of 8 warps, which loads each chunk of rows once for both; 1 gives each tile its
  // own block of 4 warps; 0 (auto) takes 2 for 512 value columns where the plan keeps as many
  // warps on a multiprocessor.
  int32_t tiles_per_block = 0;
  // The device's compute capability (major * 10 + minor; 0: not known): kWgmma runs on 90 only,
  // the one its sm_90a machine code is for.
  int32_t compute_capability = 0;
  // > 0: the tokens of sequences that bring at least this many tokens to the pass are left to
  // another kernel (GQA prefill on FlashAttention tiles): their blocks, and their combines,
  // return at once, and their outputs are not written. Needs batch.seq_first_token and num_seqs.
  int64_t skip_seq_tokens = 0;
  int64_t num_seqs = 0;
  // The tokens the grid covers (with skip_seq_tokens, the others' only, so that no block is
  // launched for a skipped token and splits are sized for the tokens attended): 0 runs, every
  // token of the batch in order; else the i-th listed token (i < listed_at[listed_runs]) is
  // listed_first[r] + i - listed_at[r] for the run r with listed_at[r] <= i < listed_at[r + 1].
  // Partial results of splits are indexed by the listed position.
  static constexpr int kMaxListedRuns = 16;
  int32_t listed_runs = 0;
  int32_t listed_first[kMaxListedRuns] = {};
  int32_t listed_at[kMaxListedRuns + 1] = {};
};
// The tokens an attention grid covers (AttentionArgs::listed_runs; valid runs, ListedRunsValid).
inline int64_t GridTokens(const AttentionArgs& a) {
  return a.listed_runs > 0 ? a.listed_at[a.listed_runs] : a.batch.num_tokens;
}
// Whether the listed runs are well formed: at most kMaxListedRuns, listed positions from 0 up,
// each run non-empty and within the batch's tokens, in order.
inline bool ListedRunsValid(const AttentionArgs& a) {
  if (a.listed_runs == 0) return true;
  if (a.listed_runs < 0 || a.listed_runs > AttentionArgs::kMaxListedRuns || a.listed_at[0] != 0) return false;
  int64_t end = 0;  // the previous run's end
  for (int r = 0; r < a.listed_runs; ++r) {
    const int64_t n = static_cast<int64_t>(a.listed_at[r + 1]) - a.listed_at[r];
    if (n <= 0 || a.listed_first[r] < end || a.listed_first[r] + n > a.batch.num_tokens) return false;
    end = a.listed_first[r] + n;
  }
  return true;
}
// Lists the tokens of the sequences that bring fewer than `skip` tokens (seq_tokens [num_seqs]:
// each sequence's tokens; their rows are contiguous, in order) as runs of rows in `a`; leaves
// a->listed_runs 0 (every token's block, the skipped ones returning at once) where they take
// more than kMaxListedRuns runs or none.
inline void ListAttentionTokens(const int32_t* seq_tokens, int64_t num_seqs, int64_t skip, AttentionArgs* a) {
  a->listed_runs = 0;
  AttentionArgs l = *a;
  int64_t listed = 0;
  for (int64_t s = 0, row = 0; s < num_seqs; row += seq_tokens[s++]) {
    const int64_t n = seq_tokens[s];
    if (n >= skip || n <= 0) continue;
    const int r = l.listed_runs - 1;
    if (r >= 0 && l.listed_first[r] + (listed - l.listed_at[r]) == row) {
      listed += n;  // extends the last run
      continue;
    }
    if (l.listed_runs == AttentionArgs::kMaxListedRuns) return;
    l.listed_first[l.listed_runs] = static_cast<int32_t>(row);
    l.listed_at[l.listed_runs] = static_cast<int32_t>(listed);
    ++l.listed_runs;
    listed += n;
  }
  if (l.listed_runs == 0) return;
  l.listed_at[l.listed_runs] = static_cast<int32_t>(listed);
  *a = l;
}
// Blocks per token per split of the kernel that runs `a`: heads (scalar kernel) or head tiles
// (tensor cores), and how many of its blocks a multiprocessor holds (0: not known); size the
// split over the KV length.
struct AttentionBlocks {
  int64_t per_token = 0;
  int64_t per_sm = 0;
};
AttentionBlocks AttentionBlocksOf(const AttentionArgs& a);
cudaError_t LaunchAttention(const AttentionArgs& a, int32_t* err, cudaStream_t s);

// DSA: scores [T, max_ctx] (workspace) then the top_k per token into selected [T, top_k].
// The scores' kernel (the first three give the same bits): kTiled, accumulators for up to 64
// heads tiled in registers (kernels/kv_kernels.cuh: DsaScoreTiledKernel), where the heads fit;
// kStaged, a block's key rows staged in shared memory, one position a thread; kThread, one
// position a thread from global memory. Each falls back to the next where it does not apply
// (more than 64 heads; shared memory the device does not allow). kTensorCores: bf16 MMAs with
// the query in three bfloat16 parts (kernels/dsa_mma_kernels.cuh; within float32's bound of
// the others, not their bits) for up to 64 heads of up to 256 columns over BF16 or FP8 keys
// whose scale groups are whole 16-column steps; else kTiled.
enum class DsaScores { kTiled, kStaged, kThread, kTensorCores };
// The top-k runs one block per token, or, for a few tokens over long contexts, in two stages
// (kernels/kv_kernels.cuh, DsaTopKChunkKernel: each chunk of kDsaTopKChunk positions' own top_k
// by a block of its own, then the token's top_k among those), which select the same positions.
// The second form needs `candidates`, DsaTopKCandidateBytes of device scratch (0: the first).
inline constexpr int64_t kDsaTopKChunk = 8192;
size_t DsaTopKCandidateBytes(int64_t tokens, int64_t max_ctx, int64_t top_k);
cudaError_t LaunchDsaSelect(ConstMat q, ConstMat w, KvRef kv, int64_t layer, BatchRef batch, int64_t heads,
                            int64_t head_dim, int64_t key_offset, float key_scale, int64_t top_k, float* scores,
                            int32_t* selected, int64_t selected_ld, int32_t* err, cudaStream_t s,
                            DsaScores form = DsaScores::kTiled, void* candidates = nullptr,
                            bool* on_tensor_cores = nullptr);

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
  int64_t tile_rows = kGemmTileRows;  // the most rows a tile takes (32, 64 or 128)
};
cudaError_t LaunchMoePermute(const PermuteArgs& a, int32_t* err, cudaStream_t s);
// out[t] = sum over t's slots in (expert, slot) order of weights[t, k] * y[perm_pos[t*K + k]].
cudaError_t LaunchMoeCombine(const int32_t* idx, int64_t idx_ld, ConstMat weights, const int32_t* perm_pos, int64_t K,
                             ConstMat y, MutMat out, cudaStream_t s);

// ---- synthetic weights (synthetic.cu) ----
// The part rows [r0, r0 + nr) x columns [c0, c0 + nc) of a synthetic matrix with `cols`
// columns and hash stream `stream` (src/quant/synthetic_weights.h): the values of
// src/quant/synthetic_values.h at the full matrix's element and scale indices, in the layout the
// backend's PrepareWeight gives the host-made part.
struct SyntheticPartRef {
  uint64_t stream;
  int64_t cols, r0, nr, c0, nc;
};
// BF16 codes [nr, nc].
cudaError_t LaunchSyntheticBf16(SyntheticPartRef p, uint16_t* codes, cudaStream_t s);
// FP8 codes [nr, nc] and the float32 scales of the block_rows x block_cols blocks the part
// covers, [ceil((r0 + nr) / br) - r0 / br, ceil((c0 + nc) / bc) - c0 / bc].
cudaError_t LaunchSyntheticFp8(SyntheticPartRef p, int64_t block_rows, int64_t block_cols, uint8_t* codes,
                               float* scales, cudaStream_t s);
// INT4 packed codes [nr, nc / 2] and bfloat16 group scales [nr, nc / group] (c0 and nc
// multiples of the group, cols too).
cudaError_t LaunchSyntheticInt4(SyntheticPartRef p, int64_t group, uint8_t* codes, uint16_t* scales, cudaStream_t s);

}  // namespace llmrt::cuda

#endif  // LLMRT_KERNELS_KERNELS_H_
