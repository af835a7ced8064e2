// Runtime: owns the backend, the loaded model, the KV page pool and the sessions, and runs the
// scheduler loop one step at a time. Thread-safe: every public method takes the runtime lock.
#ifndef LLMRT_RUNTIME_RUNTIME_H_
#define LLMRT_RUNTIME_RUNTIME_H_

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/backend/backend.h"
#include "src/kv/kv_manager.h"
#include "src/kv/tracker.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"
#include "src/runtime/session.h"

namespace llmrt {

enum class BackendKind { kAuto, kCpu, kCuda };

// What a step does with a session whose next tokens find no free KV page.
enum class KvPressurePolicy {
  kFail,     // report LLM_ERR_KV_EXHAUSTED for that session this step; it stays as it was
  kQueue,    // it waits (prompts keep arrival order) until pages free up
  kPreempt,  // newer running sessions give their pages back and recompute later
};

struct RuntimeOptions {
  BackendKind backend = BackendKind::kAuto;
  int num_threads = 0;
  DType kv_dtype = DType::kBF16;  // F32, BF16 or F8E4M3
  bool kv_tiled = false;          // with F8E4M3: the tiled codec (scales per 128-value tile)
  uint64_t kv_budget_bytes = 256ull << 20;
  int64_t page_size = 16;
  int64_t max_sessions = 256;
  int64_t max_tokens_per_step = 512;
  KvPressurePolicy kv_pressure = KvPressurePolicy::kFail;
  bool prefix_sharing = true;
  // Integrity checking: nullptr = no-op tracker (no verification, no events).
  std::shared_ptr<KvTracker> tracker;
  // Routed-expert storage per phase.
  LoadOptions weights;
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
  DType kv_dtype = DType::kBF16;
  bool kv_tiled = false;
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
  std::array<uint64_t, 4> resident_weight_bytes{};  // by WeightFormat
  LoadOptions weights;
  KvScaleSource kv_scale_source = KvScaleSource::kNone;
};

// Faults for testing integrity checking (llm_test_control). Each returns InvalidArgument when
// its target does not exist.
enum class KvFault {
  kFreeMappedPage,   // free a page a session still maps; the next allocation reuses it
  kCorruptEntry,     // point one page-table entry at another page
  kSwapPages,        // swap one page-table entry of two sessions
};

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const std::string& model_dir,
                                                         const RuntimeOptions& options);
  ~Runtime();

  RuntimeInfo Info() const;
  absl::StatusOr<Session*> CreateSession(const SessionOptions& options);
  void DestroySession(Session* session);
  absl::Status Append(Session* session, absl::Span<const int32_t> tokens);
  absl::Status Cancel(Session* session);
  absl::Status CopyLogits(const Session* session, float* out, size_t capacity, size_t* count) const;
  // Upper bound on the results one Step reports (the number of live sessions).
  size_t MaxStepResults() const;
  // One scheduler iteration; appends one result per session scheduled or changed.
  absl::Status Step(std::vector<StepResult>* results);

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
  // scales), its tokens, pending tokens and sampler state, a model fingerprint and a checksum.
  absl::Status ExportKv(const Session* session, std::vector<uint8_t>* out) const;
  // Creates a session from an exported blob, converting rows to this runtime's codec. A blob
  // that is truncated, fails its checksum or comes from another model is an error.
  absl::StatusOr<Session*> ImportKv(absl::Span<const uint8_t> blob, const SessionOptions& options);

  // Testing hook: injects a KV fault. args: kFreeMappedPage {session id, entry},
  // kCorruptEntry {session id, entry, new page}, kSwapPages {id a, entry a, id b, entry b}.
  absl::Status InjectKvFault(KvFault fault, const std::vector<int64_t>& args);

 private:
  struct Work;
  struct BatchArrays;
  Runtime() = default;
  // Uploads the arrays, runs the model, returns the requested logit rows [S, vocab].
  absl::StatusOr<std::vector<float>> Forward(const BatchArrays& a);
  void ReleasePages(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Preempt(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Abort(Session* s, std::vector<int32_t> failed_entries, std::vector<StepResult>* results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Session* FindById(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishDestroy(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // std::mutex rather than absl::Mutex: ThreadSanitizer understands pthread mutexes without an
  // instrumented Abseil build.
  std::mutex step_mu_;  // one step at a time; taken before mu_
  mutable std::mutex mu_;
  RuntimeOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvManager> kv_ ABSL_GUARDED_BY(mu_);
  uint64_t integrity_violations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t integrity_check_ns_ ABSL_GUARDED_BY(mu_) = 0;
  KvCacheView cache_;
  uint64_t kv_bytes_per_token_ = 0;
  KvScaleSource kv_scale_source_ = KvScaleSource::kNone;
  KvRowLayout tiled_layout_;  // the tiled FP8 codec's row (cache_.tiled points here)
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);  // by id = arrival
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_RUNTIME_H_
