#include "engine.h"

#include <cstdio>
#include <utility>

namespace llm_server {
namespace {

std::string LastError(llm_status st) { return std::string(llm_status_string(st)) + ": " + llm_last_error(); }

const char* FinishName(int32_t finish) {
  switch (finish) {
    case LLM_FINISH_STOP: return "stop";
    case LLM_FINISH_LENGTH: return "length";
    case LLM_FINISH_CANCELLED: return "cancelled";
    default: return "error";
  }
}

}  // namespace

bool Request::Wait(std::chrono::milliseconds timeout, std::vector<StepEvent>* out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  out->insert(out->end(), events_.begin(), events_.end());
  events_.clear();
  return true;
}

void Request::Push(const StepEvent& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
  }
  cv_.notify_one();
}

std::unique_ptr<Engine> Engine::Create(const ServerOptions& options, std::string* error) {
  std::unique_ptr<Engine> e(new Engine());
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.backend = options.backend;
  ro.num_threads = options.num_threads;
  ro.kv_dtype = options.kv_dtype;
  ro.kv_budget_bytes = options.kv_budget_bytes;
  ro.max_sessions = options.max_sessions;
  ro.max_tokens_per_step = options.max_tokens_per_step;
  ro.kv_integrity = options.kv_integrity;
  ro.kv_pressure = options.kv_pressure;
  ro.tensor_parallel = options.tensor_parallel;
  ro.expert_parallel = options.expert_parallel;
  ro.prefill_weights = options.prefill_weights;
  ro.decode_weights = options.decode_weights;
  ro.quantized_activations = options.quantized_activations;
  ro.weight_memory = options.weight_memory;
  llm_status st = llm_runtime_create(options.model_dir.c_str(), &ro, &e->runtime_);
  if (st != LLM_OK) {
    *error = options.model_dir + ": " + LastError(st);
    return nullptr;
  }
  st = llm_tokenizer_create(options.model_dir.c_str(), &e->tokenizer_);
  if (st != LLM_OK) {
    *error = options.model_dir + ": tokenizer: " + LastError(st);
    return nullptr;  // the destructor releases the runtime
  }
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(e->runtime_, &info);
  e->context_length_ = info.max_position_embeddings;
  e->vocab_size_ = info.vocab_size;
  llm_tokenizer_info ti;
  ti.struct_size = sizeof(ti);
  llm_tokenizer_get_info(e->tokenizer_, &ti);
  e->eos_id_ = ti.eos_id;
  // The turn terminators of both families' chat formats (Kimi: <|im_end|>; GLM: the next role
  // tag), as llm-run --chat stops on them.
  for (const char* s : {"<|im_end|>", "<|user|>", "<|observation|>"}) {
    int32_t id = -1;
    if (llm_tokenizer_special_id(e->tokenizer_, s, &id) == LLM_OK) e->chat_stop_tokens_.push_back(id);
  }
  if (ti.eos_id >= 0) e->chat_stop_tokens_.push_back(ti.eos_id);
  // llm_decode_step writes one result per live session; max_sessions bounds them.
  e->max_sessions_ = options.max_sessions;
  e->results_.resize(options.max_sessions);
  e->stepper_ = std::thread([p = e.get()] { p->StepLoop(); });
  return e;
}

Engine::~Engine() {
  if (stepper_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    CancelAll();
    work_cv_.notify_all();
    stepper_.join();
  }
  // Sessions still in live_ (none unless the stepping thread gave up) die with the runtime.
  llm_runtime_destroy(runtime_);
  llm_tokenizer_destroy(tokenizer_);
}

std::shared_ptr<Request> Engine::Submit(const std::vector<int32_t>& prompt, const llm_sampling_options& sampling,
                                        std::vector<std::string> stop_strings, const std::string& user,
                                        ApiError* error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    error->http_status = 503;
    error->type = "server_error";
    error->code = "shutting_down";
    error->message = "the server is shutting down";
    return nullptr;
  }
  llm_session* s = nullptr;
  llm_status st = llm_session_create(runtime_, &sampling, &s);
  if (st != LLM_OK) {
    if (st == LLM_ERR_OUT_OF_RANGE) {
      error->http_status = 429;
      error->type = "rate_limit_error";
      error->code = "too_many_sessions";
      error->message = "too many concurrent requests: the server runs at most " + std::to_string(max_sessions_) +
                       " generations at once (--max-sessions); retry later";
      error->retry_after_s = 1;
    } else {
      error->http_status = 500;
      error->type = "server_error";
      error->message = "llm_session_create: " + LastError(st);
    }
    return nullptr;
  }
  st = llm_session_append_tokens(s, prompt.data(), prompt.size());
  if (st != LLM_OK) {
    const std::string why = LastError(st);
    // The session never became live: undo its creation here.
    llm_session_destroy(s);
    if (st == LLM_ERR_OUT_OF_RANGE) {
      *error = InvalidRequest("the prompt does not fit the context of " + std::to_string(context_length_) +
                                  " tokens (" + why + ")",
                              "", "context_length_exceeded");
    } else if (st == LLM_ERR_INVALID_ARGUMENT) {
      *error = InvalidRequest("the prompt was refused: " + why, "prompt");
    } else {
      error->http_status = 500;
      error->type = "server_error";
      error->message = "llm_session_append_tokens: " + why;
    }
    return nullptr;
  }
  llm_session_info si;
  si.struct_size = sizeof(si);
  llm_session_get_info(s, &si);
  auto request = std::make_shared<Request>(si.id, user, tokenizer_, std::move(stop_strings));
  request->session_ = s;
  live_.emplace(si.id, request);
  prompt_tokens_ += prompt.size();
  work_cv_.notify_one();
  return request;
}

void Engine::Cancel(Request* request, CancelReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  CancelLocked(request, reason);
}

void Engine::CancelLocked(Request* request, CancelReason reason) {
  if (request->session_ == nullptr || request->cancel_requested_) return;
  request->cancel_requested_ = true;
  llm_session_cancel(request->session_);
  cancelled_.Add(reason == CancelReason::kDisconnect   ? "reason=\"disconnect\""
                 : reason == CancelReason::kStopString ? "reason=\"stop_string\""
                                                       : "reason=\"shutdown\"");
}

void Engine::CancelAll() {
  std::vector<std::shared_ptr<Request>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, r] : live_) all.push_back(r);
  }
  for (auto& r : all) Cancel(r.get(), CancelReason::kShutdown);
}

size_t Engine::NumLive() {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

void Engine::StepLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !live_.empty(); });
      if (live_.empty()) return;  // stop_ and nothing left to report
    }
    size_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const llm_status st = llm_decode_step(runtime_, results_.data(), results_.size(), &n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (st == LLM_ERR_BUFFER_TOO_SMALL) {
      results_.resize(n);
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (st != LLM_OK) {
      // The step did not run at all (not one session's failure): nothing can advance, so end
      // every request rather than spin.
      std::fprintf(stderr, "llm-server: llm_decode_step: %s\n", LastError(st).c_str());
      FailAllLocked(st);
      continue;
    }
    uint32_t progressed = 0;
    for (size_t i = 0; i < n; ++i) DeliverLocked(results_[i], &progressed);
    running_ = progressed;
    if (progressed > 0) {
      ++steps_;
      step_seconds_.Observe(seconds);
      batch_size_.Observe(progressed);
    }
    if (n == 0) {
      if (stop_) {
        // Shutting down and the runtime reports nothing more: whatever is left ends here.
        FailAllLocked(LLM_ERR_CANCELLED);
        continue;
      }
      // Live sessions, none of which could run or report (for example one whose prompt is being
      // appended right now): wait for news rather than spin.
      work_cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

void Engine::DeliverLocked(const llm_step_result& r, uint32_t* progressed) {
  auto it = live_.find(r.session_id);
  if (it == live_.end()) return;
  Request& q = *it->second;
  StepEvent e;
  e.token = r.token;
  e.finish_reason = r.finish_reason;
  e.status = r.status;
  if (r.token != LLM_TOKEN_NONE) ++generation_tokens_;
  // Under the fail policy a session that found no KV page is left unchanged by the runtime and
  // would fail again at the next step: the request ends with 503 and the session goes.
  const bool terminal = r.finish_reason != LLM_FINISH_NONE || r.status != LLM_OK;
  if (!q.stopped_) {
    if (r.token != LLM_TOKEN_NONE && q.text_.Push(r.token, &e.text)) {
      // A stop string ended the reply: the session has nothing more to do; it is cancelled
      // before the next step (unless this was its last token anyway).
      q.stopped_ = true;
      e.stop_string = true;
      if (!terminal) CancelLocked(&q, CancelReason::kStopString);
    } else if (r.status == LLM_OK && (r.finish_reason == LLM_FINISH_STOP || r.finish_reason == LLM_FINISH_LENGTH)) {
      q.text_.Finish(&e.text);
    }
  }
  if (!terminal) {
    if (r.token != LLM_TOKEN_NONE || r.num_prefilled > 0) ++*progressed;
    q.Push(e);
    return;
  }
  if (r.status == LLM_ERR_KV_INTEGRITY) {
    e.failed_page = r.failed_page;
    e.failed_pages = r.num_failed_pages;
  }
  if (r.status != LLM_OK && r.status != LLM_ERR_CANCELLED) {
    failed_.Add(std::string("status=\"") + llm_status_string(r.status) + "\"");
    finished_.Add("reason=\"error\"");
  } else {
    finished_.Add(std::string("reason=\"") + FinishName(r.finish_reason) + "\"");
  }
  llm_session_destroy(q.session_);
  q.session_ = nullptr;
  auto keep = it->second;  // Push after erase: the request outlives the map entry
  live_.erase(it);
  keep->Push(e);
}

void Engine::FailAllLocked(llm_status status) {
  for (auto& [id, r] : live_) {
    llm_session_destroy(r->session_);
    r->session_ = nullptr;
    StepEvent e;
    e.finish_reason = LLM_FINISH_ERROR;
    e.status = status;
    r->Push(e);
    finished_.Add("reason=\"error\"");
  }
  live_.clear();
}

std::optional<ApiError> Engine::InjectFault(const std::string& user, int32_t op, int64_t entry, int64_t page,
                                            uint64_t* session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, r] : live_) {
    if (r->user_ != user || r->session_ == nullptr || r->cancel_requested_) continue;
    llm_session_info si;
    si.struct_size = sizeof(si);
    llm_session_get_info(r->session_, &si);
    if (entry < 0 || static_cast<uint64_t>(entry) >= si.num_pages) {
      ApiError e;
      e.http_status = 409;
      e.type = "invalid_request_error";
      e.code = "not_ready";
      e.message = "the session of user '" + user + "' maps " + std::to_string(si.num_pages) + " pages; entry " +
                  std::to_string(entry) + " is not mapped (yet)";
      return e;
    }
    std::vector<int64_t> args = {static_cast<int64_t>(id), entry};
    if (op == LLM_TESTCTL_KV_CORRUPT_ENTRY) args.push_back(page);
    const llm_status st = llm_test_control(runtime_, op, args.data(), args.size());
    if (st != LLM_OK) return InvalidRequest("llm_test_control: " + LastError(st), "op");
    *session_id = id;
    return std::nullopt;
  }
  ApiError e;
  e.http_status = 404;
  e.type = "invalid_request_error";
  e.code = "not_found";
  e.message = "no running request has user '" + user + "'";
  return e;
}

void Engine::RenderMetrics(std::string* out) {
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(runtime_, &info);
  size_t live = 0;  // sessions still to run: a cancelled one only awaits its last report
  uint32_t running = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : live_) live += r->cancel_requested_ ? 0 : 1;
    running = running_;
  }
  if (running > live) running = static_cast<uint32_t>(live);
  RenderScalar("llmrt_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
               static_cast<double>(prompt_tokens_.load()), out);
  RenderScalar("llmrt_generation_tokens_total", "counter", "Tokens generated.",
               static_cast<double>(generation_tokens_.load()), out);
  RenderScalar("llmrt_steps_total", "counter", "llm_decode_step calls that advanced at least one session.",
               static_cast<double>(steps_.load()), out);
  RenderScalar("llmrt_requests_running", "gauge", "Sessions that advanced in the last step.", running, out);
  RenderScalar("llmrt_requests_waiting", "gauge",
               "Live sessions that did not advance in the last step (queued for KV pages or not yet scheduled).",
               static_cast<double>(live - running), out);
  RenderScalar("llmrt_kv_pages_total", "gauge", "KV cache pages.", info.pages_total, out);
  RenderScalar("llmrt_kv_pages_used", "gauge", "KV cache pages held by sessions.",
               info.pages_total - info.pages_free, out);
  RenderScalar("llmrt_kv_pages_free", "gauge", "Free KV cache pages.", info.pages_free, out);
  RenderScalar("llmrt_kv_pages_shared", "gauge", "KV pages held by more than one session (prefix sharing).",
               info.pages_shared, out);
  RenderScalar("llmrt_kv_page_size_tokens", "gauge", "Tokens per KV page.", info.page_size_tokens, out);
  RenderScalar("llmrt_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
               static_cast<double>(info.prefix_lookup_tokens), out);
  RenderScalar("llmrt_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from shared KV pages.",
               static_cast<double>(info.prefix_hit_tokens), out);
  RenderScalar("llmrt_prefix_cache_hit_rate", "gauge", "prefix_cache_hit_tokens / prefix_cache_lookup_tokens.",
               info.prefix_lookup_tokens == 0
                   ? 0.0
                   : static_cast<double>(info.prefix_hit_tokens) / static_cast<double>(info.prefix_lookup_tokens),
               out);
  RenderScalar("llmrt_kv_integrity_violations_total", "counter", "Sessions aborted by KV page verification.",
               static_cast<double>(info.integrity_violations), out);
  RenderScalar("llmrt_preemptions_total", "counter", "Sessions preempted under KV pressure.",
               static_cast<double>(info.preemptions), out);
  finished_.Render("llmrt_sessions_finished_total", "Sessions ended, by reason.", out);
  cancelled_.Render("llmrt_sessions_cancelled_total", "Sessions cancelled by the server, by reason.", out);
  failed_.Render("llmrt_sessions_failed_total", "Sessions that ended with an error, by status.", out);
  step_seconds_.Render("llmrt_step_duration_seconds", "Wall time of llm_decode_step calls that advanced a session.",
                       out);
  batch_size_.Render("llmrt_step_batch_sessions", "Sessions advanced per step.", out);
  ttft_seconds_.Render("llmrt_time_to_first_token_seconds", "From admission to the first generated token.", out);
}

}  // namespace llm_server
