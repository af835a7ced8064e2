#include <set>

#include "gtest/gtest.h"
#include "src/kv/page_pool.h"
#include "src/kv/page_table.h"

namespace llmrt {
namespace {

TEST(PagePool, EveryAllocationGetsAFreshTag) {
  PagePool pool(3);
  std::set<uint64_t> tags;
  auto a = pool.Allocate();
  ASSERT_TRUE(a);
  tags.insert(a->tag);
  EXPECT_EQ(pool.tag(a->page), a->tag);
  pool.Free(a->page);
  EXPECT_EQ(pool.tag(a->page), 0u);
  for (int i = 0; i < 10; ++i) {
    auto p = pool.Allocate();
    ASSERT_TRUE(p);
    EXPECT_TRUE(tags.insert(p->tag).second) << "tag reused";
    pool.Free(p->page);
  }
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(PagePool, ExhaustionReturnsNothing) {
  PagePool pool(2);
  EXPECT_TRUE(pool.Allocate());
  EXPECT_TRUE(pool.Allocate());
  EXPECT_FALSE(pool.Allocate());
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(PageTable, ReserveIsAllOrNothing) {
  PagePool pool(4);
  PageTable a, b;
  ASSERT_TRUE(a.Reserve(pool, 33, 16));  // 3 pages
  EXPECT_EQ(a.num_pages(), 3);
  EXPECT_FALSE(b.Reserve(pool, 20, 16));  // needs 2, one left
  EXPECT_EQ(b.num_pages(), 0);
  EXPECT_EQ(pool.num_free(), 1);
  ASSERT_TRUE(a.Reserve(pool, 48, 16));  // still 3 pages
  EXPECT_EQ(a.num_pages(), 3);
  a.Truncate(pool, 16, 16);
  EXPECT_EQ(a.num_pages(), 1);
  EXPECT_EQ(pool.num_free(), 3);
  a.ReleaseAll(pool);
  EXPECT_EQ(pool.num_free(), 4);
}

}  // namespace
}  // namespace llmrt
