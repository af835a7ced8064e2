// The page allocator: metadata only (which pages are free, who holds them, their tags), never
// page memory (src/kv/kv_store.h owns that). A page holds page_size tokens of every layer's
// rows. Each time a page is handed out it gets a new 64-bit tag, so a stale (page, tag) pair
// held by anyone after the page was freed and reused no longer matches. Pages are reference
// counted: prefix sharing adds holders, the last release frees the page.
#ifndef LLMRT_KV_PAGE_ALLOCATOR_H_
#define LLMRT_KV_PAGE_ALLOCATOR_H_

#include <cstdint>
#include <optional>

namespace llmrt {

struct PageRef {
  int32_t page = -1;
  uint64_t tag = 0;
};

class PageAllocator {
 public:
  virtual ~PageAllocator() = default;

  virtual int32_t num_pages() const = 0;
  virtual int32_t num_free() const = 0;
  // Pages with more than one holder.
  virtual int32_t num_shared() const = 0;

  // A free page with a fresh tag and one holder; nullopt when none is free.
  virtual std::optional<PageRef> Allocate() = 0;
  // Adds a holder to an allocated page. REQUIRES: ref still matches the page's tag.
  virtual void Share(const PageRef& ref) = 0;
  // Drops one holder of ref's page if ref is still valid (its tag is current); the last holder
  // frees the page. Returns true when the page was freed. A stale ref is ignored: its page has
  // been freed and possibly handed to someone else, who must not lose it.
  virtual bool Release(const PageRef& ref) = 0;
  // Frees the page outright whatever its holders (fault injection: the real-world bug).
  virtual void ForceFree(int32_t page) = 0;
  // Sets the page's holder count; 0 frees it (used when reclaiming orphaned pages).
  virtual void SetHolders(int32_t page, int32_t holders) = 0;

  // The page's current tag (0 while free).
  virtual uint64_t tag(int32_t page) const = 0;
  virtual int32_t holders(int32_t page) const = 0;
  bool IsCurrent(const PageRef& ref) const {
    return ref.page >= 0 && ref.page < num_pages() && ref.tag != 0 && tag(ref.page) == ref.tag;
  }
};

}  // namespace llmrt

#endif  // LLMRT_KV_PAGE_ALLOCATOR_H_
