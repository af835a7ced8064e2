// A session's page table: the pages that hold its positions, in order, each with the tag it
// carried when the session got it (the tag the session expects). Position p lives in
// entries()[p / page_size].page.
#ifndef LLMRT_KV_PAGE_TABLE_H_
#define LLMRT_KV_PAGE_TABLE_H_

#include <cstdint>
#include <vector>

#include "src/kv/page_allocator.h"

namespace llmrt {

class PageTable {
 public:
  const std::vector<PageRef>& entries() const { return entries_; }
  std::vector<PageRef>& mutable_entries() { return entries_; }
  int32_t num_pages() const { return static_cast<int32_t>(entries_.size()); }

 private:
  std::vector<PageRef> entries_;
};

}  // namespace llmrt

#endif  // LLMRT_KV_PAGE_TABLE_H_
