#include "src/backend/cpu/weight_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/util/safetensors.h"

namespace llmrt::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunkBytes = size_t{256} << 20;

// One anonymous mapping whose 2 MiB-aligned interior is advised for huge pages.
class HugeChunk final : public Storage {
 public:
  explicit HugeChunk(size_t bytes) {
    // One page of slack to align the start to a huge page: the kernel can only back aligned
    // 2 MiB ranges with a huge page.
    size_ = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      error_ = errno;
      return;
    }
    base_ = p;
    data_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage);
#ifdef MADV_HUGEPAGE
    // Advice only: without transparent huge pages the memory is ordinary pages.
    ::madvise(data_, size_ - kHugePage, MADV_HUGEPAGE);
#endif
  }
  ~HugeChunk() override {
    if (base_ != nullptr) ::munmap(base_, size_);
  }
  char* data() const { return data_; }
  size_t capacity() const { return size_ - kHugePage; }
  int error() const { return error_; }

 private:
  void* base_ = nullptr;
  char* data_ = nullptr;
  size_t size_ = 0;
  int error_ = 0;
};

}  // namespace

bool TransparentHugePagesAvailable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

WeightMemory ResolveWeightMemory(WeightMemory requested) {
  if (requested != WeightMemory::kAuto) return requested;
  static const bool thp = TransparentHugePagesAvailable();
  return thp ? WeightMemory::kHugePages : WeightMemory::kMapped;
}

absl::StatusOr<HugePageArena::Copy> HugePageArena::CopyIn(const std::shared_ptr<Storage>& source, const void* src,
                                                          size_t bytes, ThreadPool* pool) {
  Copy out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t need = std::max<size_t>(bytes, 1);
    if (chunk_ == nullptr || static_cast<size_t>(end_ - next_) < need) {
      auto chunk = std::make_shared<HugeChunk>(std::max(kChunkBytes, need));
      if (chunk->data() == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat("cannot map ", chunk->capacity() >> 20,
                                                         " MiB of memory for weights: ",
                                                         std::strerror(chunk->error())));
      }
      next_ = chunk->data();
      end_ = next_ + chunk->capacity();
      chunk_ = std::move(chunk);
    }
    out.keepalive = chunk_;
    out.data = next_;
    next_ += (need + 63) / 64 * 64;
    if (next_ > end_) next_ = end_;
  }
  // The copy itself runs outside the lock: ranges never overlap.
  if (pool != nullptr && pool->num_threads() > 1 && bytes >= 4 * kHugePage) {
    char* dst = static_cast<char*>(out.data);
    const char* from = static_cast<const char*>(src);
    pool->ParallelFor((bytes + kHugePage - 1) / kHugePage, 1, [&](size_t begin, size_t end) {
      const size_t lo = begin * kHugePage;
      const size_t hi = std::min(bytes, end * kHugePage);
      std::memcpy(dst + lo, from + lo, hi - lo);
    });
  } else if (bytes > 0) {
    std::memcpy(out.data, src, bytes);
  }
  if (dynamic_cast<const MappedFile*>(source.get()) != nullptr) {
    // A read-only private file mapping: dropping its pages loses nothing.
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(src) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(src) + bytes) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
  return out;
}

}  // namespace llmrt::cpu
