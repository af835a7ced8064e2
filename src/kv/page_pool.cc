#include "src/kv/page_pool.h"

#include "src/util/status.h"

namespace llmrt {

PagePool::PagePool(int32_t num_pages) : tags_(num_pages, 0), allocated_(num_pages, false) {
  free_.reserve(num_pages);
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<PageRef> PagePool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t p = free_.back();
  free_.pop_back();
  allocated_[p] = true;
  tags_[p] = next_tag_++;
  return PageRef{p, tags_[p]};
}

void PagePool::Free(int32_t page) {
  LLMRT_CHECK(page >= 0 && page < num_pages() && allocated_[page]);
  allocated_[page] = false;
  tags_[page] = 0;
  free_.push_back(page);
}

}  // namespace llmrt
