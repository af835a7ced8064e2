// The C ABI: sessions, stepping, scoring, KV export and import, the testing hook.
#include <cstring>
#include <string>
#include <vector>

#include "src/api/api_internal.h"

using llmrt::api::Fail;
using llmrt::api::HandleErrorScope;
using llmrt::api::FromHandle;
using llmrt::api::ReadOptions;
using llmrt::api::Report;
using llmrt::api::ToHandle;
using llmrt::api::ToLlmStatus;
using llmrt::api::WriteOut;
using llmrt::api::WriteText;

extern "C" {

LLM_API void llm_sampling_options_init(llm_sampling_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->top_p = 1.0f;
}

namespace {

// Sampling options from the ABI struct (NULL: defaults).
llm_status ToSessionOptions(const llm_sampling_options* options, llmrt::SessionOptions* so) {
  llm_sampling_options o;
  llm_sampling_options_init(&o);
  if (!ReadOptions(options, &o)) return Fail(LLM_ERR_INVALID_ARGUMENT, "options->struct_size is invalid");
  if (o.num_stop_tokens > 0 && o.stop_tokens == nullptr) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "stop_tokens is NULL but num_stop_tokens > 0");
  }
  so->sampling.temperature = o.temperature;
  so->sampling.top_k = o.top_k;
  so->sampling.top_p = o.top_p;
  so->sampling.min_p = o.min_p;
  so->max_new_tokens = o.max_new_tokens;
  so->seed = o.seed;
  so->stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.num_stop_tokens);
  if ((o.flags & ~static_cast<uint32_t>(LLM_SAMPLING_NO_LOGITS)) != 0) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "options->flags has bits other than LLM_SAMPLING_NO_LOGITS");
  }
  so->keep_logits = (o.flags & LLM_SAMPLING_NO_LOGITS) == 0;
  return LLM_OK;
}

}  // namespace

namespace {

llm_status ExportKv(llm_session* session, const void* key, size_t key_len, void* buffer, size_t capacity,
                    size_t* out_size) {
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_size);
  llmrt::Session* s = FromHandle(session);
  std::vector<uint8_t> blob;
  const absl::Status st =
      s->runtime()->ExportKv(s, absl::MakeConstSpan(static_cast<const uint8_t*>(key), key_len), &blob);
  if (!st.ok()) return Report(st);
  *out_size = blob.size();
  if (buffer == nullptr || capacity < blob.size()) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "the export needs " + std::to_string(blob.size()) + " bytes");
  }
  std::memcpy(buffer, blob.data(), blob.size());
  return LLM_OK;
}

llm_status ImportKv(llm_runtime* runtime, const void* data, size_t size, const void* key, size_t key_len,
                    const llm_sampling_options* options, llm_session** out_session) {
  LLM_REQUIRE(out_session);
  *out_session = nullptr;
  LLM_REQUIRE(runtime);
  LLM_REQUIRE(data);
  llmrt::SessionOptions so;
  if (const llm_status st = ToSessionOptions(options, &so); st != LLM_OK) return st;
  auto s = runtime->rep->ImportKv(absl::MakeConstSpan(static_cast<const uint8_t*>(data), size),
                                  absl::MakeConstSpan(static_cast<const uint8_t*>(key), key_len), so);
  if (!s.ok()) return Report(s.status());
  *out_session = ToHandle(*s);
  return LLM_OK;
}

}  // namespace

LLM_API llm_status llm_session_export_kv(llm_session* session, void* buffer, size_t capacity, size_t* out_size) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  return ExportKv(session, nullptr, 0, buffer, capacity, out_size);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_import_kv(llm_runtime* runtime, const void* data, size_t size,
                                         const llm_sampling_options* options, llm_session** out_session) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  return ImportKv(runtime, data, size, nullptr, 0, options, out_session);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_export_kv_authenticated(llm_session* session, const void* key, size_t key_len,
                                                       void* buffer, size_t capacity, size_t* out_size) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(key);
  if (key_len == 0) return Fail(LLM_ERR_INVALID_ARGUMENT, "key_len must not be 0");
  return ExportKv(session, key, key_len, buffer, capacity, out_size);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_import_kv_authenticated(llm_runtime* runtime, const void* data, size_t size,
                                                       const void* key, size_t key_len,
                                                       const llm_sampling_options* options, llm_session** out_session) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  if (out_session != nullptr) *out_session = nullptr;
  LLM_REQUIRE(key);
  if (key_len == 0) return Fail(LLM_ERR_INVALID_ARGUMENT, "key_len must not be 0");
  return ImportKv(runtime, data, size, key, key_len, options, out_session);
  LLM_GUARD_END
}

LLM_API llm_status llm_session_create(llm_runtime* runtime, const llm_sampling_options* options,
                                      llm_session** out_session) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_session);
  *out_session = nullptr;
  LLM_REQUIRE(runtime);
  llmrt::SessionOptions so;
  if (const llm_status st = ToSessionOptions(options, &so); st != LLM_OK) return st;
  auto s = runtime->rep->CreateSession(so);
  if (!s.ok()) return Report(s.status());
  *out_session = ToHandle(*s);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_session_destroy(llm_session* session) {
  if (session == nullptr) return;
  try {
    // Forget the session's error record after it is gone: a step that recorded an error for it
    // meanwhile checks liveness after recording (see DecodeStep), so no record outlives it.
    const llmrt::api::ErrorKey key = llmrt::api::KeyOf(session);
    llmrt::Session* s = FromHandle(session);
    s->runtime()->DestroySession(s);
    llmrt::api::ForgetHandleErrors(key);
  } catch (...) {
  }
}

LLM_API llm_status llm_session_append_tokens(llm_session* session, const int32_t* tokens, size_t num_tokens) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  if (num_tokens > 0) LLM_REQUIRE(tokens);
  llmrt::Session* s = FromHandle(session);
  return Report(s->runtime()->Append(s, absl::Span<const int32_t>(tokens, num_tokens)));
  LLM_GUARD_END
}

LLM_API llm_status llm_session_cancel(llm_session* session) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  llmrt::Session* s = FromHandle(session);
  return Report(s->runtime()->Cancel(s));
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_info(const llm_session* session, llm_session_info* info) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(info);
  if (info->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "info->struct_size is not set");
  const llmrt::Session* s = FromHandle(session);
  const auto snap = s->runtime()->Snapshot(s);
  llm_session_info out;
  std::memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  switch (snap.state) {
    case llmrt::SessionState::kIdle: out.state = LLM_SESSION_IDLE; break;
    case llmrt::SessionState::kPrefill: out.state = LLM_SESSION_PREFILL; break;
    case llmrt::SessionState::kDecoding: out.state = LLM_SESSION_DECODING; break;
    case llmrt::SessionState::kFinished: out.state = LLM_SESSION_FINISHED; break;
    case llmrt::SessionState::kCancelled: out.state = LLM_SESSION_CANCELLED; break;
    case llmrt::SessionState::kFailed: out.state = LLM_SESSION_FAILED; break;
  }
  out.id = snap.id;
  out.num_tokens = snap.num_tokens;
  out.num_pending = snap.num_pending;
  out.num_generated = snap.num_generated;
  out.num_pages = snap.num_pages;
  WriteOut(out, info);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_logits(const llm_session* session, float* out, size_t capacity,
                                          size_t* out_count) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_count);
  if (capacity > 0) LLM_REQUIRE(out);
  const llmrt::Session* s = FromHandle(session);
  absl::Status st = s->runtime()->CopyLogits(s, out, capacity, out_count);
  if (st.code() == absl::StatusCode::kResourceExhausted) return Fail(LLM_ERR_BUFFER_TOO_SMALL, std::string(st.message()));
  return Report(st);
  LLM_GUARD_END
}

namespace {

// The size of llm_step_result in version 1 of the ABI: the smallest element llm_decode_step_v2 takes.
constexpr size_t kStepResultV1Size = 48;
static_assert(sizeof(llm_step_result) >= kStepResultV1Size);

// llm_decode_step with the caller's element size (llm_decode_step_v2).
llm_status DecodeStep(llm_runtime* runtime, void* results, size_t result_size, size_t capacity, size_t* out_count) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_count);
  *out_count = 0;
  LLM_REQUIRE(runtime);
  if (capacity > 0) LLM_REQUIRE(results);
  if (result_size < kStepResultV1Size) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "result_size must be at least 48 (version 1 of llm_step_result)");
  }
  if (result_size > 65536 || result_size % 8 != 0) {
    return Fail(LLM_ERR_INVALID_ARGUMENT, "result_size must be a multiple of 8 of at most 65536");
  }
  std::vector<llmrt::StepResult> rs;
  size_t needed = 0;
  absl::Status st = runtime->rep->Step(&rs, capacity, &needed);
  if (st.code() == absl::StatusCode::kOutOfRange) {
    *out_count = needed;
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, std::string(st.message()));
  }
  if (!st.ok()) return Report(st);
  LLMRT_CHECK(rs.size() <= capacity);
  for (size_t i = 0; i < rs.size(); ++i) {
    llm_step_result r;
    std::memset(&r, 0, sizeof(r));
    r.session = ToHandle(rs[i].session);
    r.session_id = rs[i].session_id;
    r.token = rs[i].token;
    r.status = ToLlmStatus(rs[i].status);
    r.num_prefilled = rs[i].num_prefilled;
    r.failed_page = rs[i].failed_pages.empty() ? -1 : rs[i].failed_pages[0];
    r.num_failed_pages = static_cast<uint32_t>(rs[i].failed_pages.size());
    if (!rs[i].status.ok() && rs[i].session != nullptr) {
      // The step result carries only the status: its message goes to the session's record. The
      // session may be destroyed by another thread from here on, so it is not dereferenced; a
      // record made after its destruction is dropped again (llm_session_destroy forgets after
      // destroying, so one of the two orders always removes it).
      const llmrt::api::ErrorKey key{runtime->rep.get(), rs[i].session_id};
      llmrt::api::RecordHandleError(key, r.status, std::string(rs[i].status.message()));
      if (!runtime->rep->IsLiveSession(rs[i].session_id)) llmrt::api::ForgetHandleErrors(key);
    }
    switch (rs[i].finish) {
      case llmrt::FinishReason::kNone: r.finish_reason = LLM_FINISH_NONE; break;
      case llmrt::FinishReason::kStop: r.finish_reason = LLM_FINISH_STOP; break;
      case llmrt::FinishReason::kLength: r.finish_reason = LLM_FINISH_LENGTH; break;
      case llmrt::FinishReason::kCancelled: r.finish_reason = LLM_FINISH_CANCELLED; break;
      case llmrt::FinishReason::kError: r.finish_reason = LLM_FINISH_ERROR; break;
    }
    char* slot = static_cast<char*>(results) + i * result_size;
    std::memcpy(slot, &r, std::min(result_size, sizeof(r)));
    if (result_size > sizeof(r)) std::memset(slot + sizeof(r), 0, result_size - sizeof(r));
  }
  *out_count = rs.size();
  return LLM_OK;
  LLM_GUARD_END
}

}  // namespace

LLM_API llm_status llm_decode_step(llm_runtime* runtime, llm_step_result* results, size_t capacity,
                                   size_t* out_count) {
  HandleErrorScope error_scope(runtime);
  return DecodeStep(runtime, results, sizeof(llm_step_result), capacity, out_count);
}

LLM_API llm_status llm_decode_step_v2(llm_runtime* runtime, void* results, size_t result_size, size_t capacity,
                                      size_t* out_count) {
  HandleErrorScope error_scope(runtime);
  return DecodeStep(runtime, results, result_size, capacity, out_count);
}

LLM_API llm_status llm_session_last_error(const llm_session* session, llm_error* error) {
  return llmrt::api::LastErrorOf(session, "session", llmrt::api::KeyOf(session), error);
}

LLM_API llm_status llm_score(llm_runtime* runtime, const int32_t* tokens, size_t num_tokens, float* logprobs,
                             int32_t* argmax) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(runtime);
  LLM_REQUIRE(tokens);
  LLM_REQUIRE(logprobs);
  return Report(runtime->rep->Score(absl::Span<const int32_t>(tokens, num_tokens), logprobs, argmax));
  LLM_GUARD_END
}

LLM_API llm_status llm_session_get_failed_pages(const llm_session* session, uint32_t* pages, size_t capacity,
                                                size_t* out_count) {
  HandleErrorScope error_scope(session);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(session);
  LLM_REQUIRE(out_count);
  if (capacity > 0) LLM_REQUIRE(pages);
  const llmrt::Session* s = FromHandle(session);
  const std::vector<int32_t> failed = s->runtime()->FailedPages(s);
  *out_count = failed.size();
  for (size_t i = 0; i < failed.size() && i < capacity; ++i) pages[i] = static_cast<uint32_t>(failed[i]);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_test_control(llm_runtime* runtime, int32_t op, const int64_t* args, size_t num_args) {
  HandleErrorScope error_scope(runtime);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(runtime);
  if (num_args > 0) LLM_REQUIRE(args);
  std::vector<int64_t> a(args, args + num_args);
  switch (op) {
    case LLM_TESTCTL_KV_FREE_MAPPED_PAGE:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kFreeMappedPage, a));
    case LLM_TESTCTL_KV_CORRUPT_ENTRY:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kCorruptEntry, a));
    case LLM_TESTCTL_KV_SWAP_PAGES:
      return Report(runtime->rep->InjectKvFault(llmrt::KvFault::kSwapPages, a));
    case LLM_TESTCTL_RANK_FAIL_NEXT_PASS:
      if (a.size() != 1 || a[0] < 0 || a[0] > INT32_MAX) return Fail(LLM_ERR_INVALID_ARGUMENT, "rank-fail takes {rank}");
      return Report(runtime->rep->InjectRankFault(static_cast<int>(a[0])));
    default:
      return Fail(LLM_ERR_INVALID_ARGUMENT, "unknown llm_test_control op " + std::to_string(op));
  }
  LLM_GUARD_END
}

}  // extern "C"
