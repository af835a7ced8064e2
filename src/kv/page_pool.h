// The KV page pool's allocator. A page holds page_size tokens of every layer's K/V. Each time a
// page is handed out it gets a new 64-bit tag (pool-wide increasing generation), so a stale
// (page, tag) pair held by anyone after the page was freed and reused no longer matches. Pages
// are reference counted: prefix sharing adds holders, the last release frees the page.
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
  // Pages with more than one holder.
  int32_t num_shared() const { return num_shared_; }

  // A free page with a fresh tag and one holder; nullopt when none is free.
  std::optional<PageRef> Allocate();
  // Adds a holder to an allocated page. REQUIRES: ref still matches the page's tag.
  void Share(const PageRef& ref);
  // Drops one holder of ref's page if ref is still valid (its tag is current); the last holder
  // frees the page. Returns true when the page was freed. A stale ref is ignored: its page has
  // been freed and possibly handed to someone else, who must not lose it.
  bool Release(const PageRef& ref);
  // Frees the page outright whatever its holders (fault injection: the real-world bug).
  void ForceFree(int32_t page);
  // Sets the page's holder count; 0 frees it (used when reclaiming orphaned pages).
  void SetHolders(int32_t page, int32_t holders);

  // The page's current tag (0 while free).
  uint64_t tag(int32_t page) const { return tags_[page]; }
  int32_t holders(int32_t page) const { return holders_[page]; }
  bool IsCurrent(const PageRef& ref) const {
    return ref.page >= 0 && ref.page < num_pages() && ref.tag != 0 && tags_[ref.page] == ref.tag;
  }

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
