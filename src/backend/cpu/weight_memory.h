// Where the CPU backend keeps weights (BackendOptions::weight_memory, LLM_WEIGHT_MEMORY_* in the
// C ABI): in place in the checkpoint's file mapping, or copied into private memory advised for
// 2 MiB pages.
//
// Why: decode at small batches streams each weight once per token. With 4 KiB pages the memory
// system walks a page table and restarts its prefetch streams every 4 KiB; with 2 MiB pages
// every 512 times less often. On an AMD Zen 4 VM (2 threads, GLM-4.5 layer shapes, interleaved
// runs) batch-1 decode read weights at 1.1-1.3x the rate it had from the file mapping
// (docs/cpu_performance.md, "Weights in 2 MiB pages").
#ifndef LLMRT_BACKEND_CPU_WEIGHT_MEMORY_H_
#define LLMRT_BACKEND_CPU_WEIGHT_MEMORY_H_

#include <cstddef>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/util/dtype.h"
#include "src/util/thread_pool.h"

namespace llmrt::cpu {

// Whether the kernel hands out transparent huge pages to memory that asks for them
// (/sys/kernel/mm/transparent_hugepage/enabled says "always" or "madvise").
bool TransparentHugePagesAvailable();

// kAuto resolved on this host: kHugePages where TransparentHugePagesAvailable(), else kMapped.
WeightMemory ResolveWeightMemory(WeightMemory requested);

// Copies of weights, packed one after another (64-byte aligned) into 256 MiB chunks of private
// anonymous memory advised for huge pages, so that small tensors do not each round up to a 2 MiB
// page. A chunk lives as long as one tensor in it. Calls may come from several threads when
// they pass no pool; with a pool, one caller at a time (as ImportHost is called: at load, never
// during a forward pass).
class HugePageArena {
 public:
  struct Copy {
    std::shared_ptr<Storage> keepalive;
    void* data = nullptr;
  };
  // Copies `bytes` from `src`. When `src` lies in a file mapping (`source` is a MappedFile), the
  // whole pages of the source range are dropped from this process's mapping afterwards (they
  // stay in the page cache; a later read faults them back in), so that loading a checkpoint
  // holds about one copy of it, not two. Large copies are split over `pool` (when not null): the
  // kernel clears each new page on the thread that first touches it, and on a VM that
  // clearing, not the copy, is most of the load time. RESOURCE_EXHAUSTED when the memory cannot
  // be mapped.
  absl::StatusOr<Copy> CopyIn(const std::shared_ptr<Storage>& source, const void* src, size_t bytes,
                              ThreadPool* pool);

 private:
  std::mutex mu_;
  std::shared_ptr<Storage> chunk_;  // the chunk being filled
  char* next_ = nullptr;
  char* end_ = nullptr;
};

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_WEIGHT_MEMORY_H_
