// Library log lines (load-time notes such as skipped tensors). They go to one process-wide sink:
// stderr by default, or the host's callback (llm_set_log_callback). Never on a hot path.
#ifndef LLMRT_UTIL_LOG_H_
#define LLMRT_UTIL_LOG_H_

#include <cstdint>
#include <string>

namespace llmrt {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using LogSink = void (*)(void* user, int32_t level, const char* message);
using LogUserDestroy = void (*)(void* user);

// Sends `message` to the sink when `level` is at least the minimum level (kInfo by default).
void Log(LogLevel level, const std::string& message);

// Replaces the sink (nullptr restores stderr) and the minimum level. Thread-safe. `destroy`
// (may be null) is called with `user` once the sink is replaced by a later call, after every
// call of `sink` in progress has returned, outside the sink's lock; never at process exit.
void SetLogSink(LogSink sink, void* user, LogLevel min_level, LogUserDestroy destroy = nullptr);

}  // namespace llmrt

#endif  // LLMRT_UTIL_LOG_H_
