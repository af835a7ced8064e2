// The thread pool covers every item exactly once in chunks of whole multiples of the caller's
// grain (the blocked matmuls rely on that), and carries exceptions of its chunks, on any thread,
// to the caller, and stays usable afterwards.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/util/thread_pool.h"

namespace llmrt {
namespace {

TEST(ThreadPool, ChunksCoverEveryItemOnceInWholeMultiplesOfTheGrainLargestFirst) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {1ul, 15ul, 16ul, 17ul, 48ul, 1000ul, 4096ul, 32000ul}) {
      for (size_t grain : {1ul, 16ul, 48ul}) {
        std::mutex mu;
        std::vector<std::pair<size_t, size_t>> chunks;
        std::vector<std::atomic<int>> seen(n);
        pool.ParallelFor(n, grain, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) seen[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          chunks.push_back({b, e});
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i << " of " << n;
        std::sort(chunks.begin(), chunks.end());
        for (size_t c = 0; c < chunks.size(); ++c) {
          const auto [b, e] = chunks[c];
          ASSERT_LT(b, e);
          ASSERT_EQ(b % grain, 0u) << "chunk [" << b << ", " << e << ") of " << n;
          if (e != n) {
            ASSERT_EQ((e - b) % grain, 0u) << "chunk [" << b << ", " << e << ") of " << n;
          }
          // Handed out in order, never growing: a later chunk is at most as long as an earlier
          // one (the last may be cut by the end).
          if (c > 0 && e != n) {
            ASSERT_LE(e - b, chunks[c - 1].second - chunks[c - 1].first);
          }
        }
        // With several threads and enough items, more than one chunk per thread, so the
        // threads can even out their finishing times.
        if (threads > 1 && n >= 64 * grain) {
          EXPECT_GT(chunks.size(), static_cast<size_t>(threads));
        }
      }
    }
  }
}

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
