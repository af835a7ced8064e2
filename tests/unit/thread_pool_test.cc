// The thread pool carries exceptions of its chunks, on any thread, to the caller, and stays
// usable afterwards.
#include <atomic>
#include <stdexcept>

#include "gtest/gtest.h"
#include "src/util/thread_pool.h"

namespace llmrt {
namespace {

TEST(ThreadPool, AnExceptionInAWorkerChunkReachesTheCaller) {
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ran{0};
    const size_t bad = static_cast<size_t>(round * 7 % 64);  // on whichever thread picks it up
    EXPECT_THROW(pool.ParallelFor(64, 1,
                                  [&](size_t b, size_t e) {
                                    for (size_t i = b; i < e; ++i) {
                                      if (i == bad) throw std::runtime_error("chunk failed");
                                      ran.fetch_add(1);
                                    }
                                  }),
                 std::runtime_error);
    EXPECT_LT(ran.load(), 64);
    // The pool is whole again: every item of the next loop runs exactly once.
    std::atomic<int> count{0};
    pool.ParallelFor(1000, 1, [&](size_t b, size_t e) { count.fetch_add(static_cast<int>(e - b)); });
    EXPECT_EQ(count.load(), 1000);
  }
}

TEST(ThreadPool, BadAllocInAWorkerIsRethrownAsIs) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.ParallelFor(16, 1, [](size_t b, size_t) { if (b >= 4) throw std::bad_alloc(); }),
               std::bad_alloc);
}

}  // namespace
}  // namespace llmrt
