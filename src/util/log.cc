#include "src/util/log.h"

#include <cstdio>
#include <mutex>

namespace llmrt {
namespace {

struct Sink {
  std::mutex mu;
  LogSink fn = nullptr;
  void* user = nullptr;
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

void SetLogSink(LogSink sink, void* user, LogLevel min_level) {
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.fn = sink;
  s.user = user;
  s.min_level = min_level;
}

}  // namespace llmrt
