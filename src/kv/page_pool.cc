#include "src/kv/page_pool.h"

#include "src/util/status.h"

namespace llmrt {

PagePool::PagePool(int32_t num_pages) : tags_(num_pages, 0), holders_(num_pages, 0) {
  free_.reserve(num_pages);
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<PageRef> PagePool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t p = free_.back();
  free_.pop_back();
  holders_[p] = 1;
  tags_[p] = next_tag_++;
  return PageRef{p, tags_[p]};
}

void PagePool::Share(const PageRef& ref) {
  LLMRT_CHECK(IsCurrent(ref) && holders_[ref.page] > 0);
  if (holders_[ref.page]++ == 1) ++num_shared_;
}

void PagePool::FreePage(int32_t page) {
  if (holders_[page] > 1) --num_shared_;
  holders_[page] = 0;
  tags_[page] = 0;
  free_.push_back(page);
}

bool PagePool::Release(const PageRef& ref) {
  if (!IsCurrent(ref)) return false;
  LLMRT_CHECK(holders_[ref.page] > 0);
  if (holders_[ref.page] == 1) {
    FreePage(ref.page);
    return true;
  }
  if (--holders_[ref.page] == 1) --num_shared_;
  return false;
}

void PagePool::ForceFree(int32_t page) {
  LLMRT_CHECK(page >= 0 && page < num_pages());
  if (holders_[page] > 0) FreePage(page);
}

void PagePool::SetHolders(int32_t page, int32_t holders) {
  LLMRT_CHECK(page >= 0 && page < num_pages() && holders >= 0 && holders_[page] > 0);
  if (holders == 0) {
    FreePage(page);
    return;
  }
  if (holders_[page] > 1 && holders == 1) --num_shared_;
  if (holders_[page] == 1 && holders > 1) ++num_shared_;
  holders_[page] = holders;
}

}  // namespace llmrt
