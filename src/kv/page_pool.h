// PagePool: the page allocator as a free stack plus per-page tags and holder counts.
#ifndef LLMRT_KV_PAGE_POOL_H_
#define LLMRT_KV_PAGE_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "src/kv/page_allocator.h"

namespace llmrt {

class PagePool final : public PageAllocator {
 public:
  explicit PagePool(int32_t num_pages);

  int32_t num_pages() const override { return static_cast<int32_t>(tags_.size()); }
  int32_t num_free() const override { return static_cast<int32_t>(free_.size()); }
  int32_t num_shared() const override { return num_shared_; }

  std::optional<PageRef> Allocate() override;
  void Share(const PageRef& ref) override;
  bool Release(const PageRef& ref) override;
  void ForceFree(int32_t page) override;
  void SetHolders(int32_t page, int32_t holders) override;

  uint64_t tag(int32_t page) const override { return tags_[page]; }
  int32_t holders(int32_t page) const override { return holders_[page]; }

 private:
  void FreePage(int32_t page);

  std::vector<int32_t> free_;  // stack: the most recently freed page is handed out next
  std::vector<uint64_t> tags_;
  std::vector<int32_t> holders_;
  int32_t num_shared_ = 0;
  uint64_t next_tag_ = 1;
};

}  // namespace llmrt

#endif  // LLMRT_KV_PAGE_POOL_H_
