#include "src/api/api_internal.h"

namespace llmrt::api {
namespace {

thread_local std::string g_last_error;

}  // namespace

llm_status Fail(llm_status code, std::string msg) {
  g_last_error = std::move(msg);
  return code;
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
