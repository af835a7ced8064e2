#include "src/runtime/session.h"

#include <algorithm>

namespace llmrt {

bool Session::IsStopToken(int32_t t) const {
  const auto& s = options_.stop_tokens;
  return std::find(s.begin(), s.end(), t) != s.end();
}

}  // namespace llmrt
