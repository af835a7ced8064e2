// Status helpers shared by every layer: the return/assign macros absl does not ship publicly.
#ifndef LLMRT_UTIL_STATUS_H_
#define LLMRT_UTIL_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LLMRT_CONCAT_INNER_(a, b) a##b
#define LLMRT_CONCAT_(a, b) LLMRT_CONCAT_INNER_(a, b)

#define LLMRT_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status _llmrt_status = (expr);         \
    if (!_llmrt_status.ok()) return _llmrt_status; \
  } while (0)

#define LLMRT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#define LLMRT_ASSIGN_OR_RETURN(lhs, expr) \
  LLMRT_ASSIGN_OR_RETURN_IMPL_(LLMRT_CONCAT_(_llmrt_statusor_, __LINE__), lhs, expr)

// Internal invariant check: a violated one is a bug in llmrt, never a user error. It throws,
// and the C ABI boundary turns the exception into LLM_ERR_INTERNAL with this message.
#define LLMRT_CHECK(cond)                                                              \
  do {                                                                                 \
    if (!(cond)) ::llmrt::internal::CheckFailed(__FILE__, __LINE__, #cond);            \
  } while (0)

namespace llmrt {
namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace internal

// Thrown by LLMRT_CHECK; carries the failed condition.
class InternalError : public std::exception {
 public:
  explicit InternalError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};
}  // namespace llmrt

#endif  // LLMRT_UTIL_STATUS_H_
