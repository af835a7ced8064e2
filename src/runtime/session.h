// Session: one conversation's state inside a runtime. All access goes through the Runtime,
// which holds its lock; a Session has no locking of its own.
#ifndef LLMRT_RUNTIME_SESSION_H_
#define LLMRT_RUNTIME_SESSION_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "src/kv/page_table.h"
#include "src/sched/sampler.h"

namespace llmrt {

class Runtime;

struct SessionOptions {
  SamplingParams sampling;
  uint32_t max_new_tokens = 0;  // 0: unlimited
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;
  // Whether the logits of the sampled position are copied back for llm_session_get_logits
  // (LLM_SAMPLING_NO_LOGITS clears it: only the sampled ids leave the device).
  bool keep_logits = true;
};

enum class SessionState { kIdle, kPrefill, kDecoding, kFinished, kCancelled, kFailed };

class Session {
 public:
  Session(Runtime* runtime, uint64_t id, SessionOptions options)
      : runtime_(runtime), id_(id), options_(std::move(options)), rng_(options_.seed) {}

  Runtime* runtime() const { return runtime_; }
  uint64_t id() const { return id_; }
  const SessionOptions& options() const { return options_; }
  SessionState state() const { return state_; }

  // Tokens whose K/V is in the cache, in order.
  const std::vector<int32_t>& context() const { return context_; }
  const std::deque<int32_t>& pending() const { return pending_; }
  uint32_t num_generated() const { return num_generated_; }
  const PageTable& page_table() const { return pages_; }
  PageTable& page_table() { return pages_; }
  const std::vector<float>& logits() const { return logits_; }

  bool IsStopToken(int32_t t) const;

 private:
  friend class Runtime;

  Runtime* runtime_;
  uint64_t id_;
  SessionOptions options_;
  Rng rng_;
  SessionState state_ = SessionState::kIdle;
  std::vector<int32_t> context_;
  std::deque<int32_t> pending_;
  // The last token of a finished generation: part of the conversation, fed with the next turn.
  std::optional<int32_t> unfed_token_;
  uint32_t num_generated_ = 0;
  PageTable pages_;
  std::vector<float> logits_;
  bool report_cancel_ = false;
  // Set while a step's forward pass uses the session's pages (the runtime lock is released
  // then); destroy and cancel defer page release to the step's commit.
  bool in_flight_ = false;
  bool destroy_requested_ = false;
  // Preempted mid-generation: its context is being recomputed; no new turn may be appended.
  bool recomputing_ = false;
  // False for sessions imported without authentication: their pages never enter the prefix
  // cache, so a tampered import cannot change what other sessions compute.
  bool share_prefix_ = true;
  // Page ids whose tags failed verification (LLM_ERR_KV_INTEGRITY).
  std::vector<int32_t> failed_pages_;
};

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_SESSION_H_
