#include "src/api/api_internal.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"

namespace llmrt::api {
namespace {

thread_local std::string g_last_error;
thread_local llm_status g_last_status = LLM_OK;
thread_local uint64_t g_failures = 0;  // Fail() calls on this thread, for HandleErrorScope

struct HandleError {
  llm_status status;
  std::string message;
};

struct HandleErrors {
  std::mutex mu;
  absl::flat_hash_map<ErrorKey, HandleError> by_key;
};

HandleErrors& GetHandleErrors() {
  static HandleErrors* errors = new HandleErrors();  // never destroyed: used until process exit
  return *errors;
}

// Writes status and message into the caller's struct, honouring an older, smaller struct_size.
void WriteError(llm_status status, const std::string& msg, llm_error* out) {
  llm_error e;
  std::memset(&e, 0, sizeof(e));
  e.struct_size = sizeof(e);
  e.status = status;
  size_t n = std::min(msg.size(), sizeof(e.message) - 1);
  // Cut before a UTF-8 continuation byte so the message stays valid text.
  if (n < msg.size()) {
    while (n > 0 && (static_cast<unsigned char>(msg[n]) & 0xC0) == 0x80) --n;
  }
  std::memcpy(e.message, msg.data(), n);
  WriteOut(e, out);
}

}  // namespace

llm_status Fail(llm_status code, std::string msg) {
  g_last_error = std::move(msg);
  g_last_status = code;
  ++g_failures;
  return code;
}

ErrorKey KeyOf(const llm_session* session) {
  if (session == nullptr) return ErrorKey{};
  const Session* s = FromHandle(session);
  return ErrorKey{s->runtime(), s->id()};
}

HandleErrorScope::HandleErrorScope(ErrorKey key) : key_(key), failures_at_entry_(g_failures) {}

HandleErrorScope::~HandleErrorScope() {
  if (key_.handle == nullptr || g_failures == failures_at_entry_) return;
  RecordHandleError(key_, g_last_status, g_last_error);
}

void RecordHandleError(ErrorKey key, llm_status status, std::string message) {
  try {
    HandleErrors& errors = GetHandleErrors();
    std::lock_guard<std::mutex> lock(errors.mu);
    errors.by_key[key] = HandleError{status, std::move(message)};
  } catch (...) {
    // Out of memory while recording: the thread-local message still has it.
  }
}

void ForgetHandleErrors(ErrorKey key) {
  HandleErrors& errors = GetHandleErrors();
  std::lock_guard<std::mutex> lock(errors.mu);
  errors.by_key.erase(key);
}

void ForgetHandleErrors(const void* handle) {
  if (handle == nullptr) return;
  HandleErrors& errors = GetHandleErrors();
  std::lock_guard<std::mutex> lock(errors.mu);
  absl::erase_if(errors.by_key, [handle](const auto& kv) { return kv.first.handle == handle; });
}

llm_status LastErrorOf(const void* handle, const char* name, ErrorKey key, llm_error* out) {
  if (handle == nullptr) return Fail(LLM_ERR_INVALID_ARGUMENT, std::string(name) + " must not be NULL");
  if (out == nullptr) return Fail(LLM_ERR_INVALID_ARGUMENT, "error must not be NULL");
  if (out->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "error->struct_size is not set");
  try {
    HandleError found{LLM_OK, std::string()};
    {
      HandleErrors& errors = GetHandleErrors();
      std::lock_guard<std::mutex> lock(errors.mu);
      if (auto it = errors.by_key.find(key); it != errors.by_key.end()) {
        found.status = it->second.status;
        // What fits in llm_error.message, plus a character's worth for the UTF-8 cut.
        found.message.assign(it->second.message, 0, sizeof(out->message) - 1 + 4);
      }
    }
    WriteError(found.status, found.message, out);
    return LLM_OK;
  } catch (const std::bad_alloc&) {
    return Fail(LLM_ERR_OUT_OF_MEMORY, "out of memory");
  }
}

void FillError(llm_status status, llm_error* out) {
  if (out == nullptr || out->struct_size < sizeof(uint32_t)) return;
  WriteError(status, status == LLM_OK ? std::string() : g_last_error, out);
}

const char* LastError() { return g_last_error.c_str(); }

// The one mapping from internal status codes to the ABI's (see src/util/errors.h).
llm_status ToLlmStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return LLM_OK;
    case absl::StatusCode::kInvalidArgument: return LLM_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound: return LLM_ERR_NOT_FOUND;
    case absl::StatusCode::kUnknown: return LLM_ERR_IO;
    case absl::StatusCode::kDataLoss: return LLM_ERR_FORMAT;
    case absl::StatusCode::kUnimplemented: return LLM_ERR_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted: return LLM_ERR_OUT_OF_MEMORY;
    case absl::StatusCode::kUnavailable: return LLM_ERR_KV_EXHAUSTED;
    case absl::StatusCode::kAborted: return LLM_ERR_KV_INTEGRITY;
    case absl::StatusCode::kCancelled: return LLM_ERR_CANCELLED;
    case absl::StatusCode::kFailedPrecondition: return LLM_ERR_INVALID_STATE;
    case absl::StatusCode::kOutOfRange: return LLM_ERR_OUT_OF_RANGE;
    default: return LLM_ERR_INTERNAL;
  }
}

llm_status Report(const absl::Status& s) {
  if (s.ok()) return LLM_OK;
  return Fail(ToLlmStatus(s), std::string(s.message()));
}

// Copies text into a caller buffer with a NUL terminator; BUFFER_TOO_SMALL when it does not fit.
llm_status WriteText(const std::string& t, char* out, size_t capacity, size_t* out_len) {
  *out_len = t.size();
  if (capacity < t.size() + 1) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "text needs " + std::to_string(t.size() + 1) + " bytes");
  }
  std::memcpy(out, t.data(), t.size());
  out[t.size()] = '\0';
  return LLM_OK;
}

}  // namespace llmrt::api
