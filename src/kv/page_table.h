// A session's page table: the pages (with the tags they carried when handed out) that hold
// its positions, in order. Position p lives in pages()[p / page_size].
#ifndef LLMRT_KV_PAGE_TABLE_H_
#define LLMRT_KV_PAGE_TABLE_H_

#include <cstdint>
#include <vector>

#include "src/kv/page_pool.h"

namespace llmrt {

class PageTable {
 public:
  const std::vector<PageRef>& pages() const { return pages_; }
  int32_t num_pages() const { return static_cast<int32_t>(pages_.size()); }

  // Grows the table to cover `num_positions` positions of `page_size` tokens. All or nothing:
  // when the pool runs dry the pages taken by this call are returned and false is returned.
  bool Reserve(PagePool& pool, int64_t num_positions, int64_t page_size);
  // Shrinks the table to the pages needed by `num_positions`, freeing the rest.
  void Truncate(PagePool& pool, int64_t num_positions, int64_t page_size);
  void ReleaseAll(PagePool& pool) { Truncate(pool, 0, 1); }

 private:
  std::vector<PageRef> pages_;
};

}  // namespace llmrt

#endif  // LLMRT_KV_PAGE_TABLE_H_
