// KvManager: the page pool, the integrity tracker and the prefix cache, operating on sessions'
// page tables. It knows sessions only by id and token values; nothing of models.
#ifndef LLMRT_KV_KV_MANAGER_H_
#define LLMRT_KV_KV_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "src/kv/page_allocator.h"
#include "src/kv/page_table.h"
#include "src/kv/tracker.h"

namespace llmrt {

struct PrefixStats {
  uint64_t lookup_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t hit_tokens = 0;     // of which were found in shared pages
};

class KvManager {
 public:
  // Manages the pages of `allocator` (a PagePool unless the caller brings another).
  KvManager(std::unique_ptr<PageAllocator> allocator, int64_t page_size, std::shared_ptr<KvTracker> tracker,
            bool prefix_sharing);

  PageAllocator& pool() { return *pool_; }
  const PageAllocator& pool() const { return *pool_; }
  KvTracker& tracker() { return *tracker_; }
  int64_t page_size() const { return page_size_; }
  const PrefixStats& prefix_stats() const { return stats_; }
  bool prefix_sharing() const { return prefix_sharing_; }

  // Grows `table` to cover num_positions. All or nothing: on a dry pool the pages taken by this
  // call are returned and false is returned.
  bool Reserve(uint64_t session, PageTable& table, int64_t num_positions);
  // Shrinks `table` to the pages needed by num_positions, releasing the rest.
  void Truncate(uint64_t session, PageTable& table, int64_t num_positions);
  // Releases every page of `table` the session still validly holds; entries whose tag no longer
  // matches are dropped without touching the page (it belongs to someone else now).
  void ReleaseAll(uint64_t session, PageTable& table);

  // Verifies each entry's tag against the pool; returns the indices of failed entries, after
  // reporting them to the tracker. Then asks the tracker (veto => entry index -1 returned).
  std::vector<int32_t> Verify(uint64_t session, const PageTable& table);

  // Prefix sharing. For a session with an empty table whose queued prompt is `tokens`, appends
  // shared pages for the longest run of full leading blocks found in the cache, leaving at least
  // one token to compute. Returns the number of tokens covered. (Taken back by ReleaseAll when
  // the prompt does not run after all.)
  int64_t ShareCachedPrefix(uint64_t session, PageTable& table, const std::vector<int32_t>& tokens);
  // Counts a prompt's lookup in prefix_stats(): `looked_up` tokens, of which `hit` were served
  // from shared pages. The runtime counts a lookup once the pass that used it has run, so a
  // prompt retried over several steps counts once.
  void CountPrefixLookup(int64_t looked_up, int64_t hit);
  // Records the session's full pages (positions [0, context.size())) in the prefix cache.
  void RegisterPrefix(uint64_t session, const PageTable& table, const std::vector<int32_t>& context);

  // Reclaims pages held by no live table: `for_each_table` must call its argument on every live
  // session's table. Used after integrity violations, whose corrupted entries orphan pages.
  int32_t ReclaimOrphans(const std::function<void(const std::function<void(const PageTable&)>&)>& for_each_table);

 private:
  struct PrefixEntry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    PageRef ref;
    uint64_t owner = 0;
  };
  static uint64_t BlockHash(uint64_t parent, const int32_t* tokens, int64_t n);

  std::unique_ptr<PageAllocator> pool_;
  int64_t page_size_;
  std::shared_ptr<KvTracker> tracker_;
  bool observe_;
  bool prefix_sharing_;
  std::unordered_map<uint64_t, PrefixEntry> prefix_;
  PrefixStats stats_;
};

}  // namespace llmrt

#endif  // LLMRT_KV_KV_MANAGER_H_
