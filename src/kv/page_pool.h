// The KV page pool's allocator. A page holds page_size tokens of every layer's K/V. Each time a
// page is handed out it gets a new 64-bit tag (pool-wide increasing generation), so a stale
// (page, tag) pair held by anyone after the page was freed and reused no longer matches.
#ifndef LLMRT_KV_PAGE_POOL_H_
#define LLMRT_KV_PAGE_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace llmrt {

struct PageRef {
  int32_t page = -1;
  uint64_t tag = 0;
};

class PagePool {
 public:
  explicit PagePool(int32_t num_pages);

  int32_t num_pages() const { return static_cast<int32_t>(tags_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // A free page with a fresh tag; nullopt when none is free.
  std::optional<PageRef> Allocate();
  // Returns a page to the pool. REQUIRES: allocated and not yet freed.
  void Free(int32_t page);
  // The page's current tag (0 while free).
  uint64_t tag(int32_t page) const { return tags_[page]; }
  bool is_allocated(int32_t page) const { return allocated_[page]; }

 private:
  std::vector<int32_t> free_;   // stack; lowest page ids handed out first
  std::vector<uint64_t> tags_;
  std::vector<bool> allocated_;
  uint64_t next_tag_ = 1;
};

}  // namespace llmrt

#endif  // LLMRT_KV_PAGE_POOL_H_
