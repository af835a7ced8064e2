#include "src/backend/registry.h"

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#ifdef LLMRT_WITH_CUDA
#include "src/backend/cuda/cuda_backend.h"
#endif
#include "src/util/errors.h"
#include "src/util/log.h"

namespace llmrt {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<BackendEntry> entries;
};

Registry& Get() {
  static Registry* r = [] {
    auto* reg = new Registry();
    reg->entries.push_back(CpuBackendEntry());
#ifdef LLMRT_WITH_CUDA
    reg->entries.push_back(CudaBackendEntry());
#endif
    return reg;
  }();
  return *r;
}

}  // namespace

const char* BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto: return "auto";
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "?";
}

void RegisterBackend(const BackendEntry& entry) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.push_back(entry);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, const BackendOptions& options) {
  Registry& r = Get();
  std::vector<BackendEntry> entries;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    entries = r.entries;
  }
  if (kind == BackendKind::kAuto) {
    for (const BackendEntry& e : entries) {  // a device backend that can run here first
      if (e.kind == BackendKind::kCpu || !e.available()) continue;
      absl::StatusOr<std::unique_ptr<Backend>> made = e.create(options);
      // A device that cannot take these options (an activation policy it has no kernel for, a
      // library it could not load) gives way to the CPU; a real failure (out of memory) is reported.
      if (made.ok() || made.status().code() != absl::StatusCode::kUnimplemented) return made;
      Log(LogLevel::kWarning, absl::StrCat("the ", BackendKindName(e.kind), " backend cannot run here (",
                                           made.status().message(), "); using the CPU backend"));
    }
    kind = BackendKind::kCpu;
  }
  bool built = false;
  for (const BackendEntry& e : entries) {
    if (e.kind != kind) continue;
    built = true;
    if (e.available()) return e.create(options);
  }
  if (!built) return UnsupportedError(absl::StrCat("the ", BackendKindName(kind), " backend is not part of this build"));
  return UnsupportedError(absl::StrCat("the ", BackendKindName(kind), " backend cannot run here (no device)"));
}

int BackendDeviceCount(BackendKind kind) {
  Registry& r = Get();
  std::vector<BackendEntry> entries;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    entries = r.entries;
  }
  for (const BackendEntry& e : entries) {
    if (e.kind == BackendKind::kCpu || (kind != BackendKind::kAuto && e.kind != kind) || !e.available()) continue;
    return e.device_count != nullptr ? e.device_count() : 1;
  }
  return 0;
}

}  // namespace llmrt
