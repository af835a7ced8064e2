// What the C ABI's entry points share: the handle structs, the per-thread error message, status
// mapping, options and output-struct copying, and the guard that keeps every exception inside
// the library. The shim holds no engine logic.
#ifndef LLMRT_API_API_INTERNAL_H_
#define LLMRT_API_API_INTERNAL_H_

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "include/llmrt/llmrt.h"
#include "src/runtime/runtime.h"
#include "src/tokenizer/detokenizer.h"
#include "src/tokenizer/tokenizer.h"
#include "src/util/status.h"

struct llm_runtime {
  std::unique_ptr<llmrt::Runtime> rep;
};

struct llm_tokenizer {
  std::unique_ptr<llmrt::Tokenizer> rep;
};

struct llm_detokenizer {
  llmrt::IncrementalDetokenizer rep;
  std::string ready;  // text produced and not yet handed out
};

namespace llmrt::api {

// Sets the calling thread's last error and returns `code`.
llm_status Fail(llm_status code, std::string msg);

// Errors by handle (llm_error in the header). An entry point that takes a handle declares one of
// these before its guard; a failure the calling thread reports while it lives (Fail, including
// the guard's) is recorded on the handle. Records exist only for handles that failed, under one
// process-wide lock taken on failure paths only. Sessions are keyed by their runtime and id (ids
// are never reused within a runtime), so a record cannot outlive its session onto another one
// that happens to get the same address.
struct ErrorKey {
  const void* handle = nullptr;  // the handle; for a session, its llmrt::Runtime
  uint64_t session_id = 0;       // 0 for handles other than sessions
  friend bool operator==(const ErrorKey& a, const ErrorKey& b) {
    return a.handle == b.handle && a.session_id == b.session_id;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ErrorKey& k) {
    return H::combine(std::move(h), k.handle, k.session_id);
  }
};
inline ErrorKey KeyOf(const void* handle) { return ErrorKey{handle, 0}; }
ErrorKey KeyOf(const llm_session* session);

class HandleErrorScope {
 public:
  explicit HandleErrorScope(ErrorKey key);
  explicit HandleErrorScope(const void* handle) : HandleErrorScope(KeyOf(handle)) {}
  explicit HandleErrorScope(const llm_session* session) : HandleErrorScope(KeyOf(session)) {}
  ~HandleErrorScope();
  HandleErrorScope(const HandleErrorScope&) = delete;
  HandleErrorScope& operator=(const HandleErrorScope&) = delete;

 private:
  ErrorKey key_;
  uint64_t failures_at_entry_;
};
// Records a failure that reached the caller other than through Fail (a step result's status).
void RecordHandleError(ErrorKey key, llm_status status, std::string message);
// Drops the records of a destroyed handle; for a runtime's llmrt::Runtime, those of its sessions.
void ForgetHandleErrors(const void* handle);
void ForgetHandleErrors(ErrorKey key);
// The body of llm_*_last_error: checks the arguments (`name` is the handle parameter's), then
// copies the record of `key` into *out (LLM_OK and "" when none).
llm_status LastErrorOf(const void* handle, const char* name, ErrorKey key, llm_error* out);
// Fills a caller's llm_error with the calling thread's last status and message (LLM_OK: "").
void FillError(llm_status status, llm_error* out);
// The one mapping from internal status codes to the ABI's (see src/util/errors.h).
llm_status ToLlmStatus(const absl::Status& s);
// LLM_OK, or Fail with the status's code and message.
llm_status Report(const absl::Status& s);
const char* LastError();
// Copies text into a caller buffer with a NUL terminator; BUFFER_TOO_SMALL when it does not fit.
llm_status WriteText(const std::string& t, char* out, size_t capacity, size_t* out_len);

inline Session* FromHandle(llm_session* s) { return reinterpret_cast<Session*>(s); }
inline const Session* FromHandle(const llm_session* s) { return reinterpret_cast<const Session*>(s); }
inline llm_session* ToHandle(Session* s) { return reinterpret_cast<llm_session*>(s); }

// Copies the caller's options struct, honouring a smaller struct_size from an older header.
template <typename T>
bool ReadOptions(const T* in, T* out) {
  if (in == nullptr) return true;
  const uint32_t size = in->struct_size;
  if (size < sizeof(uint32_t) || size > (1u << 16)) return false;
  std::memcpy(out, in, std::min<size_t>(size, sizeof(T)));
  out->struct_size = sizeof(T);
  return true;
}

// Copies a filled output struct to the caller's, which may be an older, shorter version.
template <typename T>
void WriteOut(const T& filled, T* out) {
  const uint32_t n = std::min<uint32_t>(out->struct_size, sizeof(T));
  std::memcpy(out, &filled, n);
  out->struct_size = n;
}

}  // namespace llmrt::api

// Every entry point runs its body through this: exceptions become statuses.
#define LLM_GUARD_BEGIN try {
#define LLM_GUARD_END                                                                             \
  }                                                                                               \
  catch (const std::bad_alloc&) {                                                                 \
    return ::llmrt::api::Fail(LLM_ERR_OUT_OF_MEMORY, "out of memory");                            \
  }                                                                                               \
  catch (const ::llmrt::InternalError& e) {                                                       \
    return ::llmrt::api::Fail(LLM_ERR_INTERNAL, e.what());                                        \
  }                                                                                               \
  catch (const std::exception& e) {                                                               \
    return ::llmrt::api::Fail(LLM_ERR_INTERNAL, std::string("unexpected exception: ") + e.what()); \
  }                                                                                               \
  catch (...) {                                                                                   \
    return ::llmrt::api::Fail(LLM_ERR_INTERNAL, "unexpected exception");                          \
  }

#define LLM_REQUIRE(ptr)                                                                               \
  do {                                                                                                 \
    if ((ptr) == nullptr) return ::llmrt::api::Fail(LLM_ERR_INVALID_ARGUMENT, #ptr " must not be NULL"); \
  } while (0)

#endif  // LLMRT_API_API_INTERNAL_H_
