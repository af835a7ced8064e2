#include "src/util/log.h"

#include <cstdio>
#include <mutex>

namespace llmrt {
namespace {

struct Sink {
  std::mutex mu;
  LogSink fn = nullptr;
  void* user = nullptr;
  LogUserDestroy destroy = nullptr;
  LogLevel min_level = LogLevel::kInfo;
};

Sink& GetSink() {
  static Sink* sink = new Sink();  // never destroyed: logging may happen during static teardown
  return *sink;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void Log(LogLevel level, const std::string& message) {
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  if (level < s.min_level) return;
  if (s.fn != nullptr) {
    s.fn(s.user, static_cast<int32_t>(level), message.c_str());
  } else {
    std::fprintf(stderr, "llmrt %s: %s\n", LevelName(level), message.c_str());
  }
}

void SetLogSink(LogSink sink, void* user, LogLevel min_level, LogUserDestroy destroy) {
  Sink& s = GetSink();
  LogUserDestroy old_destroy;
  void* old_user;
  {
    // Log() calls the sink under this lock, so once it is held no call of the old sink runs.
    std::lock_guard<std::mutex> lock(s.mu);
    old_destroy = s.destroy;
    old_user = s.user;
    s.fn = sink;
    s.user = sink != nullptr ? user : nullptr;
    s.destroy = sink != nullptr ? destroy : nullptr;
    s.min_level = min_level;
  }
  // Outside the lock: the host's destroy may log or set another callback.
  if (old_destroy != nullptr) old_destroy(old_user);
}

}  // namespace llmrt
