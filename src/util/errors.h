// The internal status vocabulary. llmrt errors travel as absl::Status; the codes below are
// the ones the C ABI maps to llm_status (src/api/llmrt_api.cc holds the one mapping table).
#ifndef LLMRT_UTIL_ERRORS_H_
#define LLMRT_UTIL_ERRORS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace llmrt {

// A file could not be opened, mapped or read (LLM_ERR_IO).
inline absl::Status IoError(absl::string_view msg) { return absl::UnknownError(msg); }
// Corrupt, truncated or inconsistent data (LLM_ERR_FORMAT).
inline absl::Status FormatError(absl::string_view msg) { return absl::DataLossError(msg); }
// A valid input llmrt does not handle (LLM_ERR_UNSUPPORTED).
inline absl::Status UnsupportedError(absl::string_view msg) { return absl::UnimplementedError(msg); }
// No KV page was free for a session's tokens (LLM_ERR_KV_EXHAUSTED).
inline absl::Status KvExhaustedError(absl::string_view msg) { return absl::UnavailableError(msg); }
// A session's KV pages failed verification (LLM_ERR_KV_INTEGRITY).
inline absl::Status KvIntegrityError(absl::string_view msg) { return absl::AbortedError(msg); }

}  // namespace llmrt

#endif  // LLMRT_UTIL_ERRORS_H_
