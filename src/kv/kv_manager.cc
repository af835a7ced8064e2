#include "src/kv/kv_manager.h"

#include <algorithm>

namespace llmrt {

KvManager::KvManager(std::unique_ptr<PageAllocator> allocator, int64_t page_size, std::shared_ptr<KvTracker> tracker,
                     bool prefix_sharing)
    : pool_(std::move(allocator)),
      page_size_(page_size),
      tracker_(std::move(tracker)),
      observe_(tracker_->observes()),
      prefix_sharing_(prefix_sharing) {}

bool KvManager::Reserve(uint64_t session, PageTable& table, int64_t num_positions) {
  auto& e = table.mutable_entries();
  const int64_t needed = (num_positions + page_size_ - 1) / page_size_;
  const size_t before = e.size();
  while (static_cast<int64_t>(e.size()) < needed) {
    auto ref = pool_->Allocate();
    if (!ref) {
      while (e.size() > before) {
        pool_->Release(e.back());
        e.pop_back();
      }
      return false;
    }
    e.push_back(*ref);
  }
  if (observe_) {
    for (size_t i = before; i < e.size(); ++i) tracker_->OnAlloc(session, e[i]);
  }
  return true;
}

void KvManager::Truncate(uint64_t session, PageTable& table, int64_t num_positions) {
  auto& e = table.mutable_entries();
  const int64_t keep = (num_positions + page_size_ - 1) / page_size_;
  while (static_cast<int64_t>(e.size()) > keep) {
    const PageRef ref = e.back();
    e.pop_back();
    const bool valid = pool_->IsCurrent(ref);
    pool_->Release(ref);
    if (observe_ && valid) tracker_->OnFree(session, ref);
  }
}

void KvManager::ReleaseAll(uint64_t session, PageTable& table) { Truncate(session, table, 0); }

std::vector<int32_t> KvManager::Verify(uint64_t session, const PageTable& table) {
  std::vector<int32_t> failed;
  const auto& e = table.entries();
  for (size_t i = 0; i < e.size(); ++i) {
    if (!pool_->IsCurrent(e[i])) {
      failed.push_back(static_cast<int32_t>(i));
      const uint64_t actual = e[i].page >= 0 && e[i].page < pool_->num_pages() ? pool_->tag(e[i].page) : 0;
      tracker_->OnViolation(session, static_cast<int32_t>(i), e[i], actual);
    }
  }
  if (failed.empty() && !tracker_->OnVerify(session, e)) failed.push_back(-1);
  return failed;
}

uint64_t KvManager::BlockHash(uint64_t parent, const int32_t* tokens, int64_t n) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h == 0 ? 1 : h;
}

int64_t KvManager::ShareCachedPrefix(uint64_t session, PageTable& table, const std::vector<int32_t>& tokens) {
  if (!prefix_sharing_ || table.num_pages() != 0) return 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  uint64_t parent = 0;
  int64_t covered = 0;
  // Only blocks that end before the last token: the last token must be computed for logits.
  while (covered + page_size_ < n) {
    const uint64_t h = BlockHash(parent, tokens.data() + covered, page_size_);
    auto it = prefix_.find(h);
    if (it == prefix_.end()) break;
    const PrefixEntry& pe = it->second;
    if (!pool_->IsCurrent(pe.ref) || pe.parent != parent ||
        !std::equal(pe.tokens.begin(), pe.tokens.end(), tokens.begin() + covered)) {
      if (!pool_->IsCurrent(pe.ref)) prefix_.erase(it);  // the page was freed: forget it
      break;
    }
    pool_->Share(pe.ref);
    table.mutable_entries().push_back(pe.ref);
    if (observe_) tracker_->OnShare(pe.owner, session, pe.ref);
    covered += page_size_;
    parent = h;
  }
  return covered;
}

void KvManager::CountPrefixLookup(int64_t looked_up, int64_t hit) {
  stats_.lookup_tokens += static_cast<uint64_t>(looked_up);
  stats_.hit_tokens += static_cast<uint64_t>(hit);
}

void KvManager::RegisterPrefix(uint64_t session, const PageTable& table, const std::vector<int32_t>& context) {
  if (!prefix_sharing_) return;
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(context.size()) / page_size_, table.num_pages());
  uint64_t parent = 0;
  for (int64_t b = 0; b < full; ++b) {
    const int32_t* blk = context.data() + b * page_size_;
    const uint64_t h = BlockHash(parent, blk, page_size_);
    const PageRef& ref = table.entries()[b];
    auto it = prefix_.find(h);
    if (it == prefix_.end() || !pool_->IsCurrent(it->second.ref)) {
      if (pool_->IsCurrent(ref)) prefix_[h] = PrefixEntry{parent, std::vector<int32_t>(blk, blk + page_size_), ref, session};
    }
    parent = h;
  }
}

int32_t KvManager::ReclaimOrphans(
    const std::function<void(const std::function<void(const PageTable&)>&)>& for_each_table) {
  std::vector<int32_t> refs(pool_->num_pages(), 0);
  for_each_table([&](const PageTable& t) {
    for (const PageRef& r : t.entries()) {
      if (pool_->IsCurrent(r)) ++refs[r.page];
    }
  });
  int32_t reclaimed = 0;
  for (int32_t p = 0; p < pool_->num_pages(); ++p) {
    const int32_t h = pool_->holders(p);
    if (h > refs[p]) {
      const PageRef ref{p, pool_->tag(p)};
      pool_->SetHolders(p, refs[p]);
      if (refs[p] == 0) {
        ++reclaimed;
        if (observe_) tracker_->OnFree(0, ref);
      }
    }
  }
  return reclaimed;
}

}  // namespace llmrt
