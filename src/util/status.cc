#include "src/util/status.h"

namespace llmrt::internal {

void CheckFailed(const char* file, int line, const char* cond) {
  throw InternalError(absl::StrCat("internal check failed at ", file, ":", line, ": ", cond));
}

}  // namespace llmrt::internal
