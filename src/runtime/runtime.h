// Runtime: owns the backend, the loaded model, the KV page pool and the sessions, and runs the
// scheduler loop one step at a time. Thread-safe: every public method takes the runtime lock.
#ifndef LLMRT_RUNTIME_RUNTIME_H_
#define LLMRT_RUNTIME_RUNTIME_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "src/backend/backend.h"
#include "src/kv/page_pool.h"
#include "src/model/checkpoint.h"
#include "src/model/model.h"
#include "src/runtime/session.h"

namespace llmrt {

enum class BackendKind { kAuto, kCpu, kCuda };

struct RuntimeOptions {
  BackendKind backend = BackendKind::kAuto;
  int num_threads = 0;
  DType kv_dtype = DType::kBF16;  // F32 or BF16
  uint64_t kv_budget_bytes = 256ull << 20;
  int64_t page_size = 16;
  int64_t max_sessions = 256;
  int64_t max_tokens_per_step = 512;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

struct StepResult {
  Session* session = nullptr;
  uint64_t session_id = 0;
  int32_t token = -1;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
  uint32_t num_prefilled = 0;
};

struct RuntimeInfo {
  std::string architecture;
  std::string model_type;
  BackendKind backend = BackendKind::kCpu;
  DType kv_dtype = DType::kBF16;
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

 private:
  Runtime() = default;
  void ReleasePages(Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  RuntimeOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PagePool> pool_ ABSL_GUARDED_BY(mu_);
  KvCacheView cache_;
  uint64_t kv_bytes_per_token_ = 0;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);  // by id = arrival
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_RUNTIME_H_
