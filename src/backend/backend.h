// The backend op interface: everything an architecture's forward pass may ask of a device.
//
// Contract ("the step contract", README "Architecture"):
//  - Tensors passed to ops live in this backend's memory (Allocate, ImportHost, PrepareWeight).
//    A forward pass allocates nothing: its buffers come from a workspace the runtime allocates
//    once (src/model/workspace.h), its metadata from one upload per step.
//  - Ops take only backend objects (tensors, prepared weights, expert banks, rope tables, KV
//    views), never host vectors, so a device backend can enqueue them and replay them as a
//    captured graph. Ops run in call order and may complete asynchronously; Download and
//    Synchronize wait.
//  - Ops do not return statuses. A failure inside an op (a device error, an exception in a CPU
//    worker thread) is recorded and later ops are skipped; Synchronize returns it. The runtime
//    fails the step's sessions with that status; nothing crashes.
//  - Activations have the backend's activation_dtype() (float32 on the CPU). Weights come in the
//    formats of the weight-format registry (src/quant/weight_format.h); matmul dispatches on the
//    format id, and a backend refuses formats it has no kernel for (PrepareWeight).
//  - Ops take `out` last and never alias inputs unless stated. backend knows nothing of models
//    or sessions: ops receive dimensions and index tensors.
#ifndef LLMRT_BACKEND_BACKEND_H_
#define LLMRT_BACKEND_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/tensor.h"
#include "src/parallel/communicator.h"
#include "src/quant/kv_codec.h"
#include "src/quant/synthetic_weights.h"
#include "src/quant/weight_format.h"

namespace llmrt {

enum class BackendKind { kAuto, kCpu, kCuda };
// Where a CPU backend keeps weights (LLM_WEIGHT_MEMORY_*; src/backend/cpu/weight_memory.h).
// kAuto: huge pages where the kernel offers them, else mapped. kDevice: only reported, by device
// backends.
enum class WeightMemory { kAuto, kMapped, kHugePages, kDevice };
const char* BackendKindName(BackendKind kind);

// A weight matrix [rows, cols] (or a vector [rows] with cols == 1) in backend memory, in a
// registered weight format, possibly in a backend-private layout (PrepareWeight).
struct Weight {
  WeightFormatId format = kWeightBf16;
  bool quantized = false;
  Tensor data;
  Tensor scales;  // quantized formats
  int64_t rows = 0;
  int64_t cols = 0;
  WeightParams params;
  bool defined() const { return data.defined() && rows > 0; }
};

// A routed-expert set prepared by the backend (stacked weights, pointer arrays, ...).
class ExpertBank {
 public:
  virtual ~ExpertBank() = default;
  virtual int64_t num_experts() const = 0;
};

// One routed expert: SwiGLU down(silu(gate(x)) * up(x)).
struct ExpertWeights {
  Weight gate;  // [inter, hidden]
  Weight up;    // [inter, hidden]
  Weight down;  // [hidden, inter]
};

// A rotary embedding prepared at load: inverse frequencies F32 [half] (YaRN applied) and the
// factor cos and sin are multiplied by.
struct RopeTable {
  Tensor inv_freq;
  int64_t half = 0;
  float attention_factor = 1.0f;
};

// Per-step metadata for paged attention (views of the step's one metadata upload). For token t
// of the batch: token_seq[t] is its sequence, token_ctx[t] the number of cached positions it
// attends to (its position + 1, causal). Sequence s owns pages
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
  // Host facts of the pass for a backend's choice of kernels: the sum of the tokens' context
  // lengths (the attention's work; 0: not known), the fewest tokens any sequence brings (0: not
  // known), and whether every sequence advances by one generated token (a decode pass,
  // ForwardBatch::decode_phase; pad rows may follow).
  int64_t total_ctx = 0;
  int64_t min_seq_tokens = 0;
  bool decode = false;
  // Host copies, [num_seqs] each, of the tokens each sequence brings and of its context (its last
  // token's), valid for the pass (null: not known).
  const int32_t* host_seq_tokens = nullptr;
  const int32_t* host_seq_ctx = nullptr;
  // MlaAttention leaves alone the tokens of the sequences that bring at least this many tokens to
  // the pass (their out_lat rows are not written): those a backend took in expanded form
  // (MlaExpandedAttention). 0: none. The other attention ops ignore it.
  int64_t skip_seq_tokens = 0;
};

// The paged KV cache (owned by src/kv/kv_store.h): pages [num_pages, num_layers, page_size,
// row_bytes] of rows in `codec`'s `layout`. Per-layer codecs keep one float32 scale per layer in
// `scales`; `scale_set` (host flags, one per layer) says which layers have one, and a forward
// pass calibrates a layer without one explicitly (KvCalibrate) before its first write.
//
// Phase policy of the lossy codecs: a forward pass attends over the positions it writes itself
// (a prefill chunk, a decoding token's own position) in BF16, from `fresh` (BF16 [max tokens per
// pass, width], rewritten by each layer's KvWrite), and over earlier positions in the codec.
struct KvCacheView {
  Tensor pages;
  const KvCodec* codec = nullptr;
  const KvRowLayout* layout = nullptr;
  Tensor scales;                 // F32 [num_layers]: per-layer codecs
  uint8_t* scale_set = nullptr;  // host [num_layers]: per-layer codecs
  Tensor fresh;                  // BF16 [fresh_rows, width]
  int64_t fresh_rows = 0;        // 0: every position is read from pages
  int64_t num_pages = 0;
  int64_t num_layers = 0;
  int64_t page_size = 0;
  int64_t width = 0;
  int64_t row_bytes = 0;
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual BackendKind kind() const = 0;
  // Where the weights this backend imports live (never kAuto).
  virtual WeightMemory weight_memory() const { return WeightMemory::kDevice; }
  // The element type of activations (float32 on the CPU).
  virtual DType activation_dtype() const { return DType::kF32; }

  // ---- memory (never during a forward pass) ----
  // A new tensor in backend memory. Counted: a step performs none after warm-up.
  absl::StatusOr<Tensor> Allocate(DType dtype, std::initializer_list<int64_t> shape);
  uint64_t allocation_count() const { return allocations_; }
  // Makes host bytes (kept alive by `keepalive`, e.g. an mmap) usable as a backend tensor. The
  // CPU backend wraps them without a copy when aligned (WeightMemory::kMapped) or copies them
  // into huge pages (kHugePages); device backends upload.
  virtual absl::StatusOr<Tensor> ImportHost(std::shared_ptr<Storage> keepalive, const void* data, DType dtype,
                                            const int64_t* shape, int rank) = 0;
  // A stored matrix in this backend's layout for its format. UNSUPPORTED when the backend has
  // no matmul kernel for the format.
  virtual absl::StatusOr<Weight> PrepareWeight(const StoredMatrix& m) = 0;
  // The synthetic matrix part `spec` (src/quant/synthetic_weights.h) made directly in this
  // backend's memory: the Weight PrepareWeight(*MakeSyntheticPart(spec)) would return, bit for
  // bit, without the host copy. nullopt (the default) when the backend does not generate: the
  // caller makes the part on the host and prepares it. REQUIRES: CheckSyntheticSpec(spec) is OK.
  // Out of device memory is RESOURCE_EXHAUSTED naming spec.name.
  virtual absl::StatusOr<std::optional<Weight>> MakeSyntheticWeight(const SyntheticMatrixSpec& spec) {
    (void)spec;
    return std::nullopt;
  }
  virtual bool SupportsWeightFormat(WeightFormatId format) const = 0;
  // Whether MlaAbsorbQuery / MlaProjectValue take an MLA kv_b stored in `format` (a quantized
  // one) as it is, with results equal to those over its F32 dequantization. Otherwise the loader
  // hands them the F32 dequantization.
  virtual bool ReadsQuantizedMlaKvB(WeightFormatId format) const {
    (void)format;
    return false;
  }
  // Whether the KV ops run over caches of `codec` (KvStore::Create refuses the others with
  // UNSUPPORTED). The CPU backend runs every registered codec.
  virtual bool SupportsKvCodec(const KvCodec& codec) const { return true; }
  // Routed experts for MoeExperts, in expert order.
  virtual absl::StatusOr<std::unique_ptr<ExpertBank>> PrepareExperts(std::vector<ExpertWeights> experts) = 0;
  virtual absl::Status Upload(const void* src, size_t bytes, const Tensor& dst) = 0;
  virtual absl::Status Download(const Tensor& src, void* dst, size_t bytes) = 0;
  // Waits for every enqueued op. Returns the first failure recorded since the last call (and
  // clears it: the backend stays usable), OK otherwise.
  virtual absl::Status Synchronize() = 0;

  // ---- elementwise and norms ----
  // t[i] = value (F32 tensors).
  virtual void Fill(const Tensor& t, float value) = 0;
  // out[t] = table[ids[t]] as float32. table [vocab, hidden]; ids I32 [T]; out [T, hidden].
  virtual void Embedding(const Weight& table, const Tensor& ids, const Tensor& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * w, per row, in float32. x may be a column view; out may be x.
  virtual void RmsNorm(const Tensor& x, const Weight& w, float eps, const Tensor& out) = 0;
  // The same over every head_dim-wide group of each row (per-head q/k norm): x [T, G * head_dim].
  virtual void HeadRmsNorm(const Tensor& x, int64_t head_dim, const Weight& w, float eps, const Tensor& out) = 0;
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
  // Rotates, in place, dims [offset, offset + 2 * rope.half) of each of `heads` heads of width
  // head_dim in every row of x [T, heads * head_dim] (x may be a column view), by angle
  // positions[t] * inv_freq[i], cos/sin times attention_factor. interleaved: pairs (2i, 2i+1)
  // (GPT-J / DeepSeek layout); else (i, i + half) (NeoX rotate_half). positions I32 [T].
  virtual void Rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const RopeTable& rope,
                    bool interleaved, const Tensor& positions) = 0;

  // ---- paged KV cache ----
  // Per-layer codecs: sets the layer's scale to codec.CalibratedScale(largest magnitude of the
  // parts' values). Called once per layer, before its first KvWrite.
  virtual void KvCalibrate(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts) = 0;
  // Writes, for every token t, parts[0][t], parts[1][t], ... side by side from column 0 of the
  // cache row slot_mapping[t] of `layer`, encoded by the cache's codec: MLA stores (latent,
  // k_rope[, indexer key]), GQA (keys, values). The parts' widths sum to at most cache.width.
  virtual void KvWrite(const KvCacheView& cache, int64_t layer, std::initializer_list<Tensor> parts,
                       const AttentionBatch& batch) = 0;
  // Copies the codec bytes of the cache rows `slots` (I32 [n]) of `layer` into dst (U8
  // [n, row_bytes]), row after row (KV export).
  virtual void KvExportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& dst) = 0;
  // Writes rows src (U8 [n, src_layout.row_bytes], encoded by src_codec with src_scale) into the
  // cache rows `slots` of `layer`, converting to the cache's codec (KV import). Per-layer cache
  // codecs use the layer's scale, which must be set.
  virtual void KvImportRows(const KvCacheView& cache, int64_t layer, const Tensor& slots, const Tensor& src,
                            const KvCodec& src_codec, const KvRowLayout& src_layout, float src_scale) = 0;

  // ---- grouped-query attention (GLM-4.5) ----
  // Cache rows hold [K of kv_heads heads | V of kv_heads heads], head_dim each. Query head h
  // uses KV head h / (heads / kv_heads). out[t,h] = softmax(q[t,h].K * scale) V over the causal
  // context of t, softmax in float32. q, out [T, heads * head_dim].
  virtual void GqaAttention(const Tensor& q, const KvCacheView& cache, int64_t layer,
                            const AttentionBatch& batch, int64_t heads, int64_t kv_heads, int64_t head_dim,
                            float scale, const Tensor& out) = 0;

  // ---- MLA attention over the paged latent cache ----
  // q_lat [T, heads, kv_lora] = per head W_UK^T q_nope, with W_UK the first `nope` rows of
  // each head's block of kv_b [heads*(nope+v), kv_lora]. q [T, heads*(nope+rope)]. kv_b is F32
  // or BF16, or a quantized format the backend reads there (ReadsQuantizedMlaKvB; else the
  // loader dequantizes it to F32); a backend refuses other formats.
  virtual void MlaAbsorbQuery(const Tensor& q, const Weight& kv_b, const MlaDims& d,
                              const Tensor& q_lat) = 0;
  // Absorbed attention: score(t, p) = (q_lat[t,h] . c_p + q_rope[t,h] . kr_p) * scale over the
  // causal context of t, softmax in float32, out_lat[t,h] = sum_p prob * c_p. Cache rows start
  // with [c (kv_lora) | kr (rope)]. With `selected` non-null (I32 [T, k], from DsaSelect), token
  // t attends only to the positions listed in row t (up to the first -1): sparse attention.
  virtual void MlaAttention(const Tensor& q_lat, const Tensor& q, const KvCacheView& cache,
                            int64_t layer, const AttentionBatch& batch, const MlaDims& d,
                            float scale, const Tensor* selected, const Tensor& out_lat) = 0;
  // out [T, heads*v] = per head W_UV o_lat[t,h], W_UV the last v rows of each head's kv_b block.
  virtual void MlaProjectValue(const Tensor& o_lat, const Weight& kv_b, const MlaDims& d,
                               const Tensor& out) = 0;

  // The MLA attention of a dense pass (no DSA selection) in expanded form, where the backend
  // takes it: out [T, heads*v] = what MlaAbsorbQuery, MlaAttention and MlaProjectValue give,
  // computed with each context position's key and value expanded per head (k_nope = W_UK c_p,
  // v = W_UV c_p; transformers' own form), which costs fewer operations than the absorbed form
  // when a pass brings many tokens of a sequence (a prefill chunk). q as for MlaAbsorbQuery,
  // rope part roped. Returns 0, having enqueued nothing, where the backend does not take the
  // pass (the default; decode passes always): the caller then runs the absorbed ops. Else returns
  // N >= 1: the backend took the sequences that bring at least N tokens to the pass, and wrote
  // the out rows of their tokens; where other sequences remain (decoding sequences beside a
  // prompt's chunk, in continuous batching), the caller runs the absorbed ops for their tokens
  // (MlaAbsorbQuery and MlaProjectValue on their rows, MlaAttention with
  // AttentionBatch::skip_seq_tokens = N). A backend returns N > min_seq_tokens only where the
  // pass's host_seq_tokens are known.
  virtual int64_t MlaExpandedAttention(const Tensor& q, const Weight& kv_b, const KvCacheView& cache, int64_t layer,
                                       const AttentionBatch& batch, const MlaDims& d, float scale, const Tensor& out) {
    (void)q, (void)kv_b, (void)cache, (void)layer, (void)batch, (void)d, (void)scale, (void)out;
    return 0;
  }

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

  // ---- mixture of experts ----
  // noaux_tc routing: logits = x gate^T in float32, s = sigmoid, choice = s + bias, group
  // masking, top-k on choice, weights s[idx] (normalized, scaled). idx I32 [T, k], w F32 [T, k].
  virtual void MoeRoute(const Tensor& x, const Weight& gate, const Weight& bias,
                        const RouterParams& p, const Tensor& idx, const Tensor& weights) = 0;
  // out [T, hidden] = sum_k weights[t,k] * expert_{idx[t,k]}(x[t]); only selected experts run.
  // Experts the bank holds no weights for (expert parallelism: another rank holds them)
  // contribute nothing.
  virtual void MoeExperts(const Tensor& x, const Tensor& idx, const Tensor& weights, const ExpertBank& experts,
                          const Tensor& out) = 0;

  // ---- sampling ----
  // ids[r] (I32 [R]) = the token row r of logits [R, V] samples with its parameters: params is
  // I32 [R * kSamplingWords], row r's words at r * kSamplingWords (src/backend/sampling.h:
  // PackSamplingRow; the arithmetic is SampleRow's). random_rows (I32 [n]) lists, ascending, the
  // rows whose parameters draw (SamplingDraws); every other row is greedy. A device backend
  // samples where the logits are, so that only the ids need to come back to the host.
  virtual void SampleTokens(const Tensor& logits, const Tensor& params, const Tensor& random_rows,
                            const Tensor& ids) = 0;

  // ---- captured passes ----
  // Whether this backend replays captured forward passes (CUDA graphs). Its passes then read
  // their attention bound (AttentionBatch::max_ctx) as a bucket: the runtime rounds it up (to a
  // power of two) so that passes of one shape enqueue the same launches.
  virtual bool captures_passes() const { return false; }
  // Runs `pass`, which enqueues the ops of one forward pass. A capturing backend records the ops a
  // pass with a nonzero `key` enqueues (the first time after a pass with that key ran directly, so
  // every buffer it grows has grown) and replays the recording for later passes with that key:
  // the caller guarantees that passes with equal keys enqueue the same ops on the same buffers
  // with the same arguments (only the buffers' contents differ). Key 0, or a backend that does
  // not capture: the pass runs directly.
  virtual absl::Status RunPass(uint64_t key, const std::function<absl::Status()>& pass) {
    (void)key;
    return pass();
  }

  // ---- tensor and expert parallelism ----
  // The rank group this backend's collectives run in; none (the default) or a group of one
  // makes every collective an identity. Set once, before the first pass; not owned.
  void set_communicator(Communicator* comm) { comm_ = comm; }
  Communicator* communicator() const { return comm_; }
  int rank() const { return comm_ != nullptr ? comm_->rank() : 0; }
  int world_size() const { return comm_ != nullptr ? comm_->size() : 1; }
  // The device stream this backend enqueues its ops on (a cudaStream_t for CUDA), for a
  // communicator whose collectives must run in order with them; nullptr for host backends.
  virtual void* device_stream() const { return nullptr; }
  // Nanoseconds this backend has spent inside collectives (moving data and waiting for the other
  // ranks), since creation.
  uint64_t collective_ns() const { return collective_ns_.load(std::memory_order_relaxed); }
  // Collectives run at their place in the op sequence and report failures like any op. Every
  // rank of a pass calls each of them, including a rank whose earlier op failed: it then
  // contributes no data and the collective fails on every rank (Communicator's peer failure),
  // so the ranks stay in step and the pass fails everywhere.
  // x [T, D] (contiguous) = the sum over ranks of x, added in rank order.
  virtual void AllReduceSum(const Tensor& x) = 0;
  // out [S, ranks * n] = every rank's local [S, n] side by side, in rank order (vocab-parallel
  // logits). scratch: [ranks * S * n] activations (contiguous). out may be a row view.
  virtual void AllGatherColumns(const Tensor& local, const Tensor& scratch, const Tensor& out) = 0;
  // Embedding over a vocabulary shard: out[t] = table[ids[t] - first_id] for ids in
  // [first_id, first_id + table.rows), zeros for the others (summed over ranks afterwards).
  virtual void EmbeddingShard(const Weight& table, int64_t first_id, const Tensor& ids, const Tensor& out) = 0;
  // Records `status` as an op's failure would be (later ops skipped, collectives contribute no
  // data, Synchronize returns it): for failures the caller detects around the ops, and for tests
  // that inject a fault on one rank.
  virtual void RecordFailure(absl::Status status) = 0;

 protected:
  virtual absl::StatusOr<Tensor> DoAllocate(DType dtype, const int64_t* shape, int rank) = 0;

 private:
  uint64_t allocations_ = 0;

 protected:
  Communicator* comm_ = nullptr;
  std::atomic<uint64_t> collective_ns_{0};
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_BACKEND_H_
