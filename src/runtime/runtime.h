// Runtime: owns the backend, the loaded model, the KV store and page allocator, and the sessions,
// and runs the scheduler loop one step at a time. Thread-safe: every public method takes the
// runtime lock. Its parts are split by concern: runtime.cc (creation, sessions, info),
// step.cc (one scheduler iteration), kv_transfer.cc (KV export and import), score.cc (teacher-
// forced scoring).
#ifndef LLMRT_RUNTIME_RUNTIME_H_
#define LLMRT_RUNTIME_RUNTIME_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/backend/backend.h"
#include "src/backend/registry.h"
#include "src/kv/kv_manager.h"
#include "src/kv/kv_store.h"
#include "src/kv/tracker.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"
#include "src/model/workspace.h"
#include "src/parallel/comm_id.h"
#include "src/parallel/in_process.h"
#include "src/parallel/rank_threads.h"
#include "src/quant/phase_policy.h"
#include "src/runtime/session.h"
#include "src/runtime/step_batch.h"
#include "src/sched/admission.h"

namespace llmrt {

struct RuntimeOptions {
  BackendKind backend = BackendKind::kAuto;
  int num_threads = 0;
  // Weights per phase, the KV codec, and whether a pass attends over its own rows in BF16.
  PhasePolicy policy;
  uint64_t kv_budget_bytes = 256ull << 20;
  int64_t page_size = 16;
  int64_t max_sessions = 256;
  int64_t max_tokens_per_step = 512;
  KvPressurePolicy kv_pressure = KvPressurePolicy::kFail;
  bool prefix_sharing = true;
  // Integrity checking: nullptr = no-op tracker (no verification, no events).
  std::shared_ptr<KvTracker> tracker;
  // Pads every decode pass to a power of two tokens (what a device backend does to replay one
  // captured graph per bucket); a backend may ask for its own buckets. For tests of padding.
  bool pad_decode_to_power_of_two = false;
  // Decode passes on a backend that captures them (CUDA graphs) replay one recording per shape
  // (tokens, logit rows, attention bound bucket); false runs every pass directly (the same
  // launches, so the same tokens). LLMRT_CUDA_GRAPHS=0 in the environment sets it false.
  bool capture_decode = true;
  // Tensor parallelism over in-process ranks (one thread, backend, model replica, KV store and
  // workspace each; num_threads is shared among them), and whether routed experts split by
  // expert (expert parallelism) rather than by intermediate column.
  int tensor_parallel = 1;
  bool expert_parallel = false;
  // Multi-process ranks (world_size > 1): this process runs rank `rank` of world_size, whose
  // collectives go through MPI (a build with LLMRT_MPI). Every process must make the same calls
  // in the same order (create the same sessions, feed them the same tokens, step together).
  int world_size = 1;
  int rank = 0;
  // The group's id every rank checks when it joins (multi-process ranks only); none: no check.
  std::optional<CommId> comm_id;
  // How long a rank waits for the others in a collective before the step fails.
  int64_t collective_timeout_ms = 60000;
  // How matmuls with quantized weights treat their activations (the backend's numerics policy).
  QuantizedActivations activations = QuantizedActivations::kExact;
  // Where CPU ranks keep the weights (file mapping or huge pages).
  WeightMemory weight_memory = WeightMemory::kAuto;
  // Synthetic weights made from this seed (Checkpoint::Synthetic): the model directory needs
  // only config.json. None: the checkpoint's tensors.
  std::optional<uint64_t> synthetic_seed;
};

// Where an FP8 KV cache's per-layer scales come from.
enum class KvScaleSource { kNone, kCheckpoint, kCalibrated, kPerTile };

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

struct StepResult {
  Session* session = nullptr;
  uint64_t session_id = 0;
  int32_t token = -1;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
  uint32_t num_prefilled = 0;
  std::vector<int32_t> failed_pages;  // with an integrity failure: the pages that failed
};

struct RuntimeInfo {
  std::string architecture;
  std::string model_type;
  BackendKind backend = BackendKind::kCpu;
  WeightMemory weight_memory = WeightMemory::kDevice;  // rank 0's backend
  uint32_t kv_codec = kKvCodecBf16;
  int64_t vocab_size = 0;
  int64_t num_layers = 0;
  uint64_t num_parameters = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_capacity_tokens = 0;
  int64_t page_size = 0;
  int64_t pages_total = 0;
  int64_t pages_free = 0;
  int64_t num_sessions = 0;
  int64_t max_position_embeddings = 0;
  int64_t pages_shared = 0;
  uint64_t prefix_lookup_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t integrity_violations = 0;
  uint64_t preemptions = 0;
  uint64_t integrity_check_ns = 0;
  BytesByFormat resident_weight_bytes{};
  PhasePolicy policy;
  KvScaleSource kv_scale_source = KvScaleSource::kNone;
  uint64_t workspace_bytes = 0;
  uint64_t padded_tokens = 0;  // rows added to decode passes to fill a bucket
  int32_t tensor_parallel = 1;  // ranks the model is split over (in-process or multi-process)
  bool expert_parallel = false;
  int32_t rank = 0;             // this process's first rank
  uint64_t rank_weight_bytes = 0;    // resident weight bytes of one rank (rank 0)
  uint64_t rank_kv_bytes_per_token = 0;  // KV bytes one rank stores per token (all layers)
  uint64_t rank_kv_capacity_tokens = 0;  // tokens each rank's KV store holds
  uint64_t collective_ns = 0;  // rank 0's time inside collectives (data movement and waiting)
};

// Faults for testing integrity checking (llm_test_control). Each returns InvalidArgument when
// its target does not exist.
enum class KvFault {
  kFreeMappedPage,   // free a page a session still maps; the next allocation reuses it
  kCorruptEntry,     // point one page-table entry at another page
  kSwapPages,        // swap one page-table entry of two sessions
};

// How far a KV import is trusted: an authenticated blob (a keyed MAC the host verified with its
// key) is treated like state this runtime computed; an unauthenticated one only affects its own
// session.
enum class KvImportTrust { kUntrusted, kAuthenticated };

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const std::string& model_dir,
                                                         const RuntimeOptions& options);
  ~Runtime();

  RuntimeInfo Info() const;
  absl::StatusOr<Session*> CreateSession(const SessionOptions& options);
  void DestroySession(Session* session);
  // Whether session `id` exists and has not been asked to go (thread-safe).
  bool IsLiveSession(uint64_t id);
  absl::Status Append(Session* session, absl::Span<const int32_t> tokens);
  absl::Status Cancel(Session* session);
  absl::Status CopyLogits(const Session* session, float* out, size_t capacity, size_t* count) const;
  // One scheduler iteration; appends one result per session scheduled or changed, at most
  // `max_results`. When more sessions are alive than max_results, returns OutOfRange with the
  // count in *needed before doing anything (checked under the lock, so no session created
  // meanwhile can make the results overflow).
  absl::Status Step(std::vector<StepResult>* results, size_t max_results, size_t* needed);

  // Snapshot of a session's counters under the lock.
  struct SessionSnapshot {
    SessionState state;
    uint64_t id;
    uint32_t num_tokens, num_pending, num_generated, num_pages;
  };
  SessionSnapshot Snapshot(const Session* session) const;
  // Pages of the session that failed verification.
  std::vector<int32_t> FailedPages(const Session* session) const;

  // Teacher-forced scoring: for each position p < n-1, the log-probability of tokens[p+1] and
  // (if argmax is not null) the most likely token. Uses KV pages of its own for the duration.
  absl::Status Score(absl::Span<const int32_t> tokens, float* logprobs, int32_t* argmax);

  // KV export / import between runtimes of the same model (prefill role -> decode role). The
  // blob holds the session's cached rows of every layer in this runtime's codec (with its FP8
  // scales), its tokens, pending tokens and sampler state, a model fingerprint, and a checksum
  // or, with a key, an HMAC-SHA256.
  absl::Status ExportKv(const Session* session, absl::Span<const uint8_t> key, std::vector<uint8_t>* out) const;
  // Creates a session from an exported blob, converting rows to this runtime's codec. A blob
  // that is truncated, fails its checksum or MAC, comes from another model, or holds tokens,
  // states, scales or values out of range is an error. An untrusted import never sets layer
  // scales and never shares its pages as prefix pages.
  absl::StatusOr<Session*> ImportKv(absl::Span<const uint8_t> blob, absl::Span<const uint8_t> key,
                                    const SessionOptions& options);

  // Testing hook: injects a KV fault. args: kFreeMappedPage {session id, entry},
  // kCorruptEntry {session id, entry, new page}, kSwapPages {id a, entry a, id b, entry b}.
  absl::Status InjectKvFault(KvFault fault, const std::vector<int64_t>& args);
  // Testing hook: the next forward pass fails on in-process rank `rank` (recorded in its backend
  // before its first op), so every rank of the pass fails it.
  absl::Status InjectRankFault(int rank);

  // For tests of the step contract: the backend's allocation count and the workspace.
  const Backend& backend() const { return *backend_; }
  uint64_t workspace_bytes() const { return workspace_->capacity(); }

 private:
  struct Work;
  // One rank's model replica: backend, communicator, weights, KV pages, workspace, step buffers.
  struct Replica {
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<KvStore> store;
    std::unique_ptr<Workspace> workspace;
    Tensor batch;         // the step metadata buffer (rank 0: batch_'s own)
    Tensor logits;        // F32 [max step logit rows, vocab]
    Tensor score_logits;  // F32 [max_tokens_per_step, vocab], made by the first Score that needs it
  };
  Runtime() = default;
  // Init's parts: every local rank's backend (device r for in-process rank r), their
  // communicators (in-process group, NCCL, MPI), then each rank's weights, KV store, workspace.
  absl::Status CreateBackends(int threads);
  absl::Status ConnectRanks();
  absl::Status InitRank(int index, const ShardPlan& plan);
  // KV rows move between runtimes only where rank 0 caches all of them and every local rank the
  // same ones: one rank, or MLA's replicated latent over in-process ranks.
  absl::Status CheckKvTransferable() const;
  absl::Status Init(const std::string& model_dir);
  // Plans the step under the lock: reports cancellations and failures into *results and
  // returns the sessions that run, with the batch built.
  std::vector<Work> Plan(std::vector<StepResult>* results) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Commit(const std::vector<Work>& work, const absl::Status& forward, std::vector<StepResult>* results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Uploads the batch's metadata to every rank, runs the model on each and waits. A step's pass
  // (not `score`): rank 0 samples every logit row into host_ids_, and copies the rows to
  // host_logits_ [rows, vocab] when a session of the step keeps its logits. A scoring pass
  // (`score`): nothing is sampled and every row comes back to host_logits_; the logits go to each
  // rank's score_logits with `score_buffer` (more rows than a step's buffer), else to its
  // logits. A failure on any rank fails the pass (the status of the rank where it began), and the
  // KV layer scales it marked are unmarked. REQUIRES: step_mu_ held.
  absl::Status Forward(StepBatch& batch, bool score = false, bool score_buffer = false);
  // The key under which `backend` may capture the pass (0: run it directly), for a backend that
  // captures passes: also rounds the pass's attention bound up to its bucket.
  uint64_t PassKey(const Backend& backend, const KvCacheView& view, bool score, ForwardBatch* fb) const;
  // The smallest attention bound bucket of a captured pass.
  static constexpr int64_t kMinCaptureContext = 256;
  void ReleasePages(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Preempt(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnshareStart(Session* s, int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Abort(Session* s, std::vector<int32_t> failed_entries, std::vector<StepResult>* results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Session* FindById(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishDestroy(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t LiveSessions() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // std::mutex rather than absl::Mutex: ThreadSanitizer understands pthread mutexes without an
  // instrumented Abseil build.
  mutable std::mutex step_mu_;  // one forward pass or KV transfer at a time (steps, scoring); taken before mu_
  mutable std::mutex mu_;
  RuntimeOptions options_;
  std::unique_ptr<Checkpoint> checkpoint_;
  // The ranks this process runs (one per in-process rank; one in a multi-process group), their
  // group and threads. backend_, model_, store_ and workspace_ are rank 0's: the host reads
  // logits, KV rows and scales there (MLA caches the same rows on every rank).
  std::vector<Replica> ranks_;
  // Every rank's per-layer KV scale flags when made, while some layer of a per-layer FP8 cache
  // has no scale yet; restored when destroyed unless kept (KvStore::RestoreScaleFlags). A failed
  // pass or import keeps none of the scales it set; llm_score keeps none at all.
  class ScaleFlagsGuard {
   public:
    explicit ScaleFlagsGuard(std::vector<Replica>& ranks);
    ~ScaleFlagsGuard();
    ScaleFlagsGuard(const ScaleFlagsGuard&) = delete;
    ScaleFlagsGuard& operator=(const ScaleFlagsGuard&) = delete;
    void Keep() { keep_ = true; }

   private:
    std::vector<Replica>& ranks_;
    std::vector<std::vector<uint8_t>> before_;  // empty: every layer had its scale
    bool keep_ = false;
  };
  std::shared_ptr<InProcessGroup> group_;
  std::unique_ptr<Communicator> process_comm_;  // multi-process: this process's rank, shared by its replica
  std::unique_ptr<RankThreads> rank_threads_;
  int fail_rank_ = -1;  // InjectRankFault (under step_mu_ when read)
  std::mutex fault_mu_;
  Backend* backend_ = nullptr;
  // The kind the backend option resolved to (AUTO: a device when present), known as soon as the
  // first rank's backend exists, so that a failed creation can tell who refused.
  BackendKind created_kind_ = BackendKind::kCpu;
  Model* model_ = nullptr;
  KvStore* store_ = nullptr;
  std::unique_ptr<KvManager> kv_ ABSL_GUARDED_BY(mu_);
  // The buffers of a forward pass, allocated once (used under step_mu_).
  Workspace* workspace_ = nullptr;
  StepBatch batch_;
  std::vector<float> host_logits_;
  // Rank 0's sampled ids (I32 [logit rows]) and their host copy; whether the step's logits come
  // back too (some session keeps its logits).
  Tensor sampled_ids_;
  std::vector<int32_t> host_ids_;
  bool step_keeps_logits_ = true;
  Tensor pass_flag_;  // multi-process: F32 [1] in rank 0's backend memory, the pass's failure summed over processes
  uint64_t integrity_violations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t integrity_check_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t padded_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  KvScaleSource kv_scale_source_ = KvScaleSource::kNone;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);  // by id = arrival
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_RUNTIME_H_
