// The server's side of llmrt: one runtime, one stepping thread that drives llm_decode_step, and a
// Request per HTTP generation that receives its session's step results through a queue.
//
// Threads. Request threads (the HTTP handlers) only create sessions and feed them their prompt
// (Submit), cancel them (Cancel) and wait for their events (Request::Wait). The stepping thread
// is the only one that calls llm_decode_step and llm_session_destroy. It turns tokens into text
// and ends a reply at its stop strings, cancelling the session before the next step. It destroys
// a session as soon as its last result (finish, cancellation or failure) has been delivered, so
// a request thread never touches a destroyed session. Engine::mu_ guards the session handles; it is never
// held across llm_decode_step, so creating and cancelling sessions never waits for a forward
// pass (the runtime releases its own lock for the pass).
//
// Scheduling is the runtime's: the engine adds no policy beyond feeding llm_decode_step while any
// session is live.
#ifndef LLMRT_SAMPLES_LLM_SERVER_ENGINE_H_
#define LLMRT_SAMPLES_LLM_SERVER_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "llmrt/llmrt.h"
#include "metrics.h"
#include "openai_api.h"
#include "options.h"
#include "text_stream.h"

namespace llm_server {

// What the stepping thread tells a request about its session after one step.
struct StepEvent {
  int32_t token = LLM_TOKEN_NONE;          // a sampled token, or none
  std::string text;                        // the reply text this event releases
  bool stop_string = false;                // a stop string ended the reply (text ends before it)
  int32_t finish_reason = LLM_FINISH_NONE; // != NONE: the session's last event
  llm_status status = LLM_OK;              // != OK: the session's last event, and why it stopped
  uint32_t failed_pages = 0;               // LLM_ERR_KV_INTEGRITY: how many pages failed
  int32_t failed_page = -1;
};

class Request {
 public:
  Request(uint64_t session_id, std::string user, const llm_tokenizer* tokenizer, std::vector<std::string> stops)
      : session_id_(session_id), user_(std::move(user)), text_(tokenizer, std::move(stops)) {}

  // Waits up to `timeout` for events and appends them to *out; returns whether any came.
  bool Wait(std::chrono::milliseconds timeout, std::vector<StepEvent>* out);

  uint64_t session_id() const { return session_id_; }

 private:
  friend class Engine;
  void Push(const StepEvent& e);

  const uint64_t session_id_;
  const std::string user_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StepEvent> events_;
  // Guarded by Engine::mu_.
  llm_session* session_ = nullptr;  // null once the stepping thread destroyed it
  bool cancel_requested_ = false;
  // Stepping thread only: the reply's text. Stop strings are matched here, as each token
  // arrives, so that a session whose reply ended is cancelled before the next step rather than
  // whenever its request thread gets to it.
  TextStream text_;
  bool stopped_ = false;
};

enum class CancelReason { kDisconnect, kStopString, kShutdown };

class Engine {
 public:
  // Loads the model and its tokenizer and starts the stepping thread. nullptr with *error set on
  // failure.
  static std::unique_ptr<Engine> Create(const ServerOptions& options, std::string* error);
  ~Engine();  // cancels what is left, joins the stepping thread, destroys the runtime
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const llm_tokenizer* tokenizer() const { return tokenizer_; }
  uint32_t context_length() const { return context_length_; }
  uint32_t vocab_size() const { return vocab_size_; }
  int32_t eos_id() const { return eos_id_; }
  // Tokens that end a chat turn in this model's chat format (and EOS).
  const std::vector<int32_t>& chat_stop_tokens() const { return chat_stop_tokens_; }

  // Creates a session sampling with `sampling`, queues `prompt` on it and hands it to the
  // stepping thread, which ends the reply at the first of `stop_strings`. On failure returns
  // null and fills *error (429 at max_sessions, 400 for a prompt the runtime refuses).
  std::shared_ptr<Request> Submit(const std::vector<int32_t>& prompt, const llm_sampling_options& sampling,
                                  std::vector<std::string> stop_strings, const std::string& user, ApiError* error);

  // Cancels the request's session (its pages are released at once); the stepping thread then
  // receives its cancellation and destroys it. No-op once the session ended.
  void Cancel(Request* request, CancelReason reason);
  // Cancels every live session (shutdown).
  void CancelAll();
  size_t NumLive();

  // The testing hook (only reachable with --enable-test-hooks): injects `op` into the KV page
  // table of the live request whose `user` field is `user`. *session_id receives its session.
  std::optional<ApiError> InjectFault(const std::string& user, int32_t op, int64_t entry, int64_t page,
                                      uint64_t* session_id);

  void ObserveTimeToFirstToken(double seconds) { ttft_seconds_.Observe(seconds); }
  // Appends the engine's metrics in Prometheus text format.
  void RenderMetrics(std::string* out);

 private:
  Engine() = default;
  void StepLoop();
  // Delivers one step result; called by the stepping thread with mu_ held.
  void DeliverLocked(const llm_step_result& r, uint32_t* progressed);
  void CancelLocked(Request* request, CancelReason reason);
  void FailAllLocked(llm_status status);

  llm_runtime* runtime_ = nullptr;
  llm_tokenizer* tokenizer_ = nullptr;
  uint32_t context_length_ = 0;
  uint32_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
  uint32_t max_sessions_ = 0;
  std::vector<int32_t> chat_stop_tokens_;

  std::thread stepper_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a session became live, or stop_
  bool stop_ = false;
  std::unordered_map<uint64_t, std::shared_ptr<Request>> live_;  // by session id
  std::vector<llm_step_result> results_;                           // stepping thread only
  uint32_t running_ = 0;  // sessions that advanced in the last step

  std::atomic<uint64_t> prompt_tokens_{0};
  std::atomic<uint64_t> generation_tokens_{0};
  std::atomic<uint64_t> steps_{0};
  LabelledCounter finished_;   // {reason="stop|length|cancelled|error"}
  LabelledCounter cancelled_;  // {reason="disconnect|stop_string|shutdown"}
  LabelledCounter failed_;     // {status="LLM_ERR_..."}
  Histogram step_seconds_{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  Histogram ttft_seconds_{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram batch_size_{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
};

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_ENGINE_H_
