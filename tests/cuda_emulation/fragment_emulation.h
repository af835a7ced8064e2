// ldmatrix and cp.async for the emulated tensor-core kernels (cuda_emulation.h runs their
// threads), from the PTX ISA:
//   ldmatrix .trans (.x2): matrix j's eight rows come from the addresses of lanes 8j .. 8j+7,
//   and lane t receives (row 2(t%4), col t/4) and (row 2(t%4)+1, col t/4) of it;
//   ldmatrix (.x4 / .x2, no transpose): lane t receives row t / 4, columns 2(t % 4),
//   2(t % 4) + 1 of matrix j;
//   cp.async: a 16-byte copy that lands some time between its issue and the issuing thread's
//   wait (see Landing).
#ifndef LLMRT_TESTS_CUDA_EMULATION_FRAGMENT_EMULATION_H_
#define LLMRT_TESTS_CUDA_EMULATION_FRAGMENT_EMULATION_H_

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emulation/cuda_emulation.h"

namespace llmrt::emulation {

inline void LdMatrixTrans2(const uint16_t* row, uint32_t* b0, uint32_t* b1) {
  Warp& w = ThisWarp();
  const int lane = static_cast<int>(threadIdx.x % 32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(row) % 16, 0u) << "ldmatrix rows are 16-byte aligned";
  w.ptrs[lane] = row;
  w.bar.ArriveAndWait();
  const int g = lane >> 2, c = lane & 3;
  uint32_t r[2];
  for (int j = 0; j < 2; ++j) {
    const uint16_t* r0 = static_cast<const uint16_t*>(w.ptrs[8 * j + 2 * c]);
    const uint16_t* r1 = static_cast<const uint16_t*>(w.ptrs[8 * j + 2 * c + 1]);
    r[j] = r0[g] | (static_cast<uint32_t>(r1[g]) << 16);
  }
  w.bar.ArriveAndWait();
  *b0 = r[0];
  *b1 = r[1];
}

// ldmatrix .x4 / .x2 (no transpose): lane t receives row t / 4, columns 2(t % 4), 2(t % 4) + 1
// of matrix j, whose rows lanes 8j .. 8j+7 address.
template <int kMatrices>
void LdMatrix(const uint16_t* row, uint32_t (&r)[kMatrices]) {
  Warp& w = ThisWarp();
  const int lane = static_cast<int>(threadIdx.x % 32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(row) % 16, 0u) << "ldmatrix rows are 16-byte aligned";
  w.ptrs[lane] = row;
  w.bar.ArriveAndWait();
  uint32_t v[kMatrices];
  for (int j = 0; j < kMatrices; ++j) {
    const uint16_t* m = static_cast<const uint16_t*>(w.ptrs[8 * j + lane / 4]);
    v[j] = m[2 * (lane % 4)] | (static_cast<uint32_t>(m[2 * (lane % 4) + 1]) << 16);
  }
  w.bar.ArriveAndWait();
  for (int j = 0; j < kMatrices; ++j) r[j] = v[j];
}
inline void LdMatrix4(const uint16_t* row, uint32_t (&r)[4]) { LdMatrix<4>(row, r); }
inline void LdMatrix2(const uint16_t* row, uint32_t (&r)[2]) { LdMatrix<2>(row, r); }

// cp.async: a copy lands at some time between its issue and the issuing thread's wait. The
// emulation lands it at either end: at the wait (the default: a thread that reads a tile before
// the copies into it were awaited and published by a barrier reads stale bytes) or at once (a
// copy into a tile that other warps are still reading overwrites it under them). The kernel's
// barriers are right when both give the reference's result. Waiting at kAtWait is as late as
// the PTX allows: wait_group N lands only the groups older than the N most recent commits.
enum class Landing { kAtWait, kAtIssue };
inline Landing g_landing = Landing::kAtWait;
struct PendingCopy {
  void* dst;
  const void* src;
  uint64_t group;  // the commits the thread had made at its issue
};
struct ThreadCopies {
  std::vector<PendingCopy> pending;
  uint64_t commits = 0;
};
inline std::vector<ThreadCopies> g_copies(1024);  // per thread of a block

inline void CpAsync16(void* shared_dst, const void* global_src) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(shared_dst) % 16, 0u) << "cp.async destinations are 16-byte aligned";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(global_src) % 16, 0u) << "cp.async sources are 16-byte aligned";
  ThreadCopies& t = g_copies[threadIdx.x];
  if (g_landing == Landing::kAtIssue) {
    std::memcpy(shared_dst, global_src, 16);
  } else {
    t.pending.push_back({shared_dst, global_src, t.commits});
  }
}

inline void CpAsyncCommit() { ++g_copies[threadIdx.x].commits; }

// Lands the copies of groups older than `before` (the count of commits), in issue order.
inline void LandGroupsBefore(ThreadCopies& t, uint64_t before) {
  std::vector<PendingCopy> keep;
  for (const PendingCopy& c : t.pending) {
    if (c.group < before) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      keep.push_back(c);
    }
  }
  t.pending = std::move(keep);
}

template <int kPending>
void CpAsyncWaitGroup() {
  ThreadCopies& t = g_copies[threadIdx.x];
  LandGroupsBefore(t, t.commits >= static_cast<uint64_t>(kPending) ? t.commits - kPending : 0);
}

// cp.async.wait_all: commit, then wait for every group.
inline void CpAsyncWaitAll() {
  ThreadCopies& t = g_copies[threadIdx.x];
  ++t.commits;
  LandGroupsBefore(t, t.commits);
}

// A block's end: every copy this thread issued was awaited (a copy still in flight would land in
// the next block's shared memory). Forgets the thread's commits for the next block.
inline void ExpectCopiesAwaited() {
  ThreadCopies& t = g_copies[threadIdx.x];
  EXPECT_TRUE(t.pending.empty()) << "thread " << threadIdx.x << " ends with copies in flight";
  t = ThreadCopies{};
}

}  // namespace llmrt::emulation

#endif  // LLMRT_TESTS_CUDA_EMULATION_FRAGMENT_EMULATION_H_
