#include <set>

#include "gtest/gtest.h"
#include "src/kv/kv_manager.h"
#include "src/kv/page_pool.h"

namespace llmrt {
namespace {

TEST(PagePool, EveryAllocationGetsAFreshTag) {
  PagePool pool(3);
  std::set<uint64_t> tags;
  auto a = pool.Allocate();
  ASSERT_TRUE(a);
  tags.insert(a->tag);
  EXPECT_EQ(pool.tag(a->page), a->tag);
  EXPECT_TRUE(pool.Release(*a));
  EXPECT_EQ(pool.tag(a->page), 0u);
  EXPECT_FALSE(pool.Release(*a));  // stale: ignored
  for (int i = 0; i < 10; ++i) {
    auto p = pool.Allocate();
    ASSERT_TRUE(p);
    EXPECT_TRUE(tags.insert(p->tag).second) << "tag reused";
    pool.Release(*p);
  }
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(PagePool, SharedPagesFreeWithTheirLastHolder) {
  PagePool pool(2);
  auto a = pool.Allocate();
  pool.Share(*a);
  pool.Share(*a);
  EXPECT_EQ(pool.holders(a->page), 3);
  EXPECT_EQ(pool.num_shared(), 1);
  EXPECT_FALSE(pool.Release(*a));
  EXPECT_FALSE(pool.Release(*a));
  EXPECT_EQ(pool.num_shared(), 0);
  EXPECT_TRUE(pool.Release(*a));
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(PagePool, ExhaustionReturnsNothing) {
  PagePool pool(2);
  EXPECT_TRUE(pool.Allocate());
  EXPECT_TRUE(pool.Allocate());
  EXPECT_FALSE(pool.Allocate());
  EXPECT_EQ(pool.num_free(), 0);
}

KvManager Manager(int32_t pages, int64_t page_size, bool verify = true) {
  return KvManager(std::make_unique<PagePool>(pages), page_size, verify ? std::shared_ptr<KvTracker>(MakeTagChecker())
                                            : std::shared_ptr<KvTracker>(MakeNoopTracker()),
                   /*prefix_sharing=*/true);
}

TEST(KvManager, ReserveIsAllOrNothing) {
  KvManager kv = Manager(4, 16);
  PageTable a, b;
  ASSERT_TRUE(kv.Reserve(1, a, 33));  // 3 pages
  EXPECT_EQ(a.num_pages(), 3);
  EXPECT_FALSE(kv.Reserve(2, b, 20));  // needs 2, one left
  EXPECT_EQ(b.num_pages(), 0);
  EXPECT_EQ(kv.pool().num_free(), 1);
  ASSERT_TRUE(kv.Reserve(1, a, 48));  // still 3 pages
  kv.Truncate(1, a, 16);
  EXPECT_EQ(a.num_pages(), 1);
  EXPECT_EQ(kv.pool().num_free(), 3);
  kv.ReleaseAll(1, a);
  EXPECT_EQ(kv.pool().num_free(), 4);
}

TEST(KvManager, VerificationCatchesReuseCorruptionAndSwaps) {
  KvManager kv = Manager(8, 4);
  PageTable a, b;
  ASSERT_TRUE(kv.Reserve(1, a, 8));
  ASSERT_TRUE(kv.Reserve(2, b, 8));
  EXPECT_TRUE(kv.Verify(1, a).empty());
  // A page freed while mapped, then handed to someone else.
  kv.pool().ForceFree(a.entries()[1].page);
  PageTable c;
  ASSERT_TRUE(kv.Reserve(3, c, 1));
  EXPECT_EQ(c.entries()[0].page, a.entries()[1].page);
  EXPECT_EQ(kv.Verify(1, a), std::vector<int32_t>{1});
  EXPECT_TRUE(kv.Verify(3, c).empty());
  // Releasing the victim must not take the page from its new owner.
  kv.ReleaseAll(1, a);
  EXPECT_TRUE(kv.Verify(3, c).empty());
  EXPECT_EQ(kv.pool().holders(c.entries()[0].page), 1);
  // Swapped mappings: both sides fail.
  std::swap(b.mutable_entries()[0].page, c.mutable_entries()[0].page);
  EXPECT_EQ(kv.Verify(2, b), std::vector<int32_t>{0});
  EXPECT_EQ(kv.Verify(3, c), std::vector<int32_t>{0});
}

TEST(KvManager, OrphansOfCorruptedEntriesAreReclaimed) {
  KvManager kv = Manager(4, 4);
  PageTable a;
  ASSERT_TRUE(kv.Reserve(1, a, 8));
  const int32_t lost = a.entries()[0].page;
  a.mutable_entries()[0].page = a.entries()[1].page;  // entry 0 now names page of entry 1
  kv.ReleaseAll(1, a);                                   // entry 1 released; entry 0 stale
  EXPECT_EQ(kv.pool().num_free(), 3);                    // `lost` has no holder left but is allocated
  EXPECT_EQ(kv.ReclaimOrphans([](const auto&) {}), 1);
  EXPECT_EQ(kv.pool().num_free(), 4);
  EXPECT_EQ(kv.pool().tag(lost), 0u);
}

TEST(KvManager, PrefixCacheSharesFullPagesOnly) {
  KvManager kv = Manager(16, 4);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  PageTable a;
  ASSERT_EQ(kv.ShareCachedPrefix(1, a, prompt), 0);  // empty cache
  ASSERT_TRUE(kv.Reserve(1, a, 10));
  kv.RegisterPrefix(1, a, prompt);  // pages 0 and 1 are full
  PageTable b;
  std::vector<int32_t> same_start = {1, 2, 3, 4, 5, 6, 7, 8, 99};
  EXPECT_EQ(kv.ShareCachedPrefix(2, b, same_start), 8);
  ASSERT_EQ(b.num_pages(), 2);
  EXPECT_EQ(b.entries()[0].page, a.entries()[0].page);
  EXPECT_EQ(kv.pool().num_shared(), 2);
  EXPECT_TRUE(kv.Verify(2, b).empty());
  // The whole prompt cached: the last block is left to compute (logits need one token).
  PageTable c;
  std::vector<int32_t> exact = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(kv.ShareCachedPrefix(3, c, exact), 4);
  // A different first block shares nothing, even with an equal second block.
  PageTable d;
  std::vector<int32_t> other = {0, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(kv.ShareCachedPrefix(4, d, other), 0);
  // Freed pages drop out of the cache.
  kv.ReleaseAll(1, a);
  kv.ReleaseAll(2, b);
  kv.ReleaseAll(3, c);
  PageTable e;
  EXPECT_EQ(kv.ShareCachedPrefix(5, e, same_start), 0);
  EXPECT_EQ(kv.pool().num_free(), 16);
}

class RecordingTracker : public KvTracker {
 public:
  bool verifies() const override { return true; }
  bool observes() const override { return true; }
  void OnAlloc(uint64_t, const PageRef&) override { ++allocs; }
  void OnFree(uint64_t, const PageRef&) override { ++frees; }
  void OnShare(uint64_t, uint64_t, const PageRef&) override { ++shares; }
  bool OnVerify(uint64_t session, const std::vector<PageRef>&) override { return session != veto; }
  void OnViolation(uint64_t, int32_t, const PageRef&, uint64_t) override { ++violations; }
  int allocs = 0, frees = 0, shares = 0, violations = 0;
  uint64_t veto = 0;
};

TEST(KvManager, TrackerSeesEveryEventAndMayVeto) {
  auto t = std::make_shared<RecordingTracker>();
  KvManager kv(std::make_unique<PagePool>(8), 4, t, true);
  PageTable a, b;
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  ASSERT_TRUE(kv.Reserve(1, a, 5));
  kv.RegisterPrefix(1, a, prompt);
  EXPECT_EQ(kv.ShareCachedPrefix(2, b, prompt), 4);
  ASSERT_TRUE(kv.Reserve(2, b, 5));
  EXPECT_EQ(t->allocs, 3);
  EXPECT_EQ(t->shares, 1);
  t->veto = 2;
  EXPECT_TRUE(kv.Verify(1, a).empty());
  EXPECT_EQ(kv.Verify(2, b), std::vector<int32_t>{-1});
  kv.pool().ForceFree(a.entries()[1].page);
  EXPECT_EQ(kv.Verify(1, a).size(), 1u);
  EXPECT_EQ(t->violations, 1);
  kv.ReleaseAll(1, a);
  kv.ReleaseAll(2, b);
  EXPECT_EQ(t->frees, 3);  // every holder release is reported: a drops page 0, b drops 0 and 1
}

}  // namespace
}  // namespace llmrt
