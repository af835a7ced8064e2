// Hopper's warpgroup MMAs (wgmma.mma_async .bf16 -> .f32, sm_90a) for the emulated kernels
// (cuda_emulation.h), from the PTX ISA's rules (section "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions"):
//   descriptor  start address, leading byte offset (LBO), stride byte offset (SBO) in 16-byte
//               units in bits 13:0, 29:16, 45:32; base offset in bits 51:49; swizzle mode in
//               bits 63:62 (1: 128 bytes). The kernels use the 128-byte swizzle only, and base
//               offset 0 (every 1024-byte pattern starts 1024-byte aligned).
//   128-byte swizzle: the byte at (logical) shared address x is stored at x ^ (((x >> 7) & 7)
//               << 4): a 16-byte piece's index within its 128-byte row XOR the row's index
//               within its 8-row, 1024-byte group.
//   K-major operand (A [64 x 16], or B [16 x N] as N rows of 16): element (row r, k) at
//               start + (r % 8) * 128 + (r / 8) * SBO + 2k.
//   N-major operand (B [16 x N], transposed): element (k, n) at start + 2 (n % 64) +
//               128 (k % 8) + LBO (n / 64) + SBO (k / 8).
//   accumulators (m64nNk16, .f32): thread 32w + 4g + c of the warpgroup holds, in d[i], row
//               16w + g + 8((i / 2) % 2), column 8(i / 4) + 2c + (i % 2).
// An MMA is issued by each of the warpgroup's 128 threads, joins the group of its warpgroup's
// next commit, and completes at the first wait_group N that leaves at most N newer groups
// pending: the emulation reads its shared operands at the first thread's issue and again when it
// completes (they must not change in between: a thread that rewrites an operand before then races
// with the hardware's read), checks at every wait that no thread touched the accumulators of an
// MMA in flight, and then computes the completed MMAs in issue order (float32 fma over k; MMAs
// in flight on the same accumulators chain, as on the device). Each product is exact; the order of the
// float32 additions is the emulation's (the hardware's is unspecified), which the tests' bounds
// allow for.
#ifndef LLMRT_TESTS_CUDA_EMULATION_WGMMA_EMULATION_H_
#define LLMRT_TESTS_CUDA_EMULATION_WGMMA_EMULATION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "tests/cuda_emulation/fragment_emulation.h"

namespace llmrt::emulation {

struct WgmmaOp {
  int n = 0;  // 32 or 256 columns
  bool trans_b = false;
  uint64_t desc_a = 0, desc_b = 0;
  int accumulate = 0;
  int issued = 0;                 // threads that issued it
  int group = 0;                  // the warpgroup's commits before it
  std::vector<float*> d;          // [128] each thread's accumulators
  std::vector<std::vector<float>> d_at_issue;  // [128] their values at issue
  std::vector<float> a, b;        // A [64][16], B [16][n] read at the first issue
};
struct WarpgroupMma {
  std::vector<WgmmaOp> ops;        // issued, not yet waited
  std::vector<int> next = std::vector<int>(128, 0);  // each thread's next op
};
inline std::vector<WarpgroupMma> g_wgmma(8);  // per warpgroup of the block being run

// Each thread's protocol state: wgmma.fence since its last wait (an MMA may not be issued
// without one: the accumulators were written since), MMAs issued since its last commit (a wait
// must follow a commit), cp.async copies landed since its last fence.proxy.async, and the block
// barrier interval of its last fence.proxy.async. The MMAs read shared memory through the async
// proxy, so no MMA may be issued while any thread's landed copies are unfenced, and (the
// kernels' protocol for their ordinary shared stores, which are not tracked one by one) every
// thread fences in the interval before the barrier that precedes an MMA.
struct ThreadProtocol {
  bool fenced = false;
  int uncommitted = 0;
  int commits = 0;  // commit_groups since the block started (StartWgBlock)
  bool copies_unfenced = false;
  uint64_t proxy_fence_interval = 0;  // the block barrier's generation at the fence
};
inline std::vector<ThreadProtocol> g_protocol(1024);
// A protocol violation: a test failure (the first few reported; each issue would repeat it).
inline int g_protocol_failures = 0;
inline void ProtocolFailure(const std::string& what) {
  if (g_protocol_failures++ < 3) ADD_FAILURE() << what;
}

inline float SharedBf16(uint32_t logical) {
  const uint32_t phys = logical ^ (((logical >> 7) & 7u) << 4);
  EXPECT_LE(static_cast<size_t>(phys) + 2, g_block->shared_bytes) << "an MMA operand outside the shared memory";
  if (static_cast<size_t>(phys) + 2 > g_block->shared_bytes) return 0.0f;
  uint16_t v;
  std::memcpy(&v, g_block->shared + phys, 2);
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

struct Descriptor {
  uint32_t addr, lbo, sbo;
};
inline Descriptor Decode(uint64_t d) {
  EXPECT_EQ(d >> 62, 1u) << "the kernels' operands use the 128-byte swizzle";
  EXPECT_EQ((d >> 49) & 7u, 0u) << "base offset 0";
  EXPECT_EQ(d & 0x3ff1c000c000c000ull, 0u) << "reserved descriptor bits";
  return Descriptor{static_cast<uint32_t>(d & 0x3fffu) << 4, static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4,
                    static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4};
}

// A [64][16] (K-major) and B [16][n] (K-major: n rows of 16; N-major: 16 rows of n).
inline void ReadOperands(const WgmmaOp& op, std::vector<float>* a, std::vector<float>* b) {
  const Descriptor da = Decode(op.desc_a), db = Decode(op.desc_b);
  a->assign(64 * 16, 0.0f);
  b->assign(static_cast<size_t>(16 * op.n), 0.0f);
  for (int r = 0; r < 64; ++r) {
    for (int k = 0; k < 16; ++k) {
      (*a)[r * 16 + k] = SharedBf16(da.addr + (r % 8) * 128 + (r / 8) * da.sbo + 2 * k);
    }
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < op.n; ++n) {
      const uint32_t at = op.trans_b ? db.addr + 2 * (n % 64) + 128 * (k % 8) + db.lbo * (n / 64) + db.sbo * (k / 8)
                                     : db.addr + (n % 8) * 128 + (n / 8) * db.sbo + 2 * k;
      (*b)[k * op.n + n] = SharedBf16(at);
    }
  }
}

inline void IssueWgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, int accumulate, bool trans_b) {
  WarpgroupMma& g = g_wgmma[threadIdx.x / 128];
  const unsigned wt = threadIdx.x % 128;
  if (!g_protocol[threadIdx.x].fenced) {
    ProtocolFailure("thread " + std::to_string(threadIdx.x) + ": an MMA without wgmma.fence");
  }
  ++g_protocol[threadIdx.x].uncommitted;
  const uint64_t generation = g_block->bar.generation;
  for (unsigned t = 0; t < g_block->fibers.size(); ++t) {
    if (g_protocol[t].copies_unfenced) {
      ProtocolFailure("thread " + std::to_string(t) + "'s landed copies reach an MMA without fence.proxy.async");
      break;
    }
    if (generation == 0 || g_protocol[t].proxy_fence_interval + 1 < generation) {
      ProtocolFailure("thread " + std::to_string(t) + " did not fence.proxy.async before the barrier before an MMA");
      break;
    }
  }
  const int k = g.next[wt]++;
  const int group = g_protocol[threadIdx.x].commits;
  if (k == static_cast<int>(g.ops.size())) {
    WgmmaOp op{n, trans_b, desc_a, desc_b, accumulate};
    op.group = group;
    op.d.assign(128, nullptr);
    op.d_at_issue.resize(128);
    ReadOperands(op, &op.a, &op.b);
    g.ops.push_back(std::move(op));
  }
  WgmmaOp& op = g.ops[k];
  EXPECT_TRUE(op.n == n && op.trans_b == trans_b && op.desc_a == desc_a && op.desc_b == desc_b &&
              op.accumulate == accumulate && op.group == group)
      << "thread " << threadIdx.x << ": the warpgroup's threads issued different MMAs";
  op.d[wt] = d;
  op.d_at_issue[wt].assign(d, d + n / 2);
  ++op.issued;
}

// wgmma.wait_group `pending` (with the commit before it): every MMA of the warpgroup's groups but
// the newest `pending` completes.
inline void WaitWgmma(int pending) {
  const unsigned wgi = threadIdx.x / 128, wt = threadIdx.x % 128;
  WarpgroupMma& g = g_wgmma[wgi];
  if (g_protocol[threadIdx.x].uncommitted != 0) {
    ProtocolFailure("thread " + std::to_string(threadIdx.x) + ": a wait for uncommitted MMAs");
  }
  g_protocol[threadIdx.x].fenced = false;
  g_block->warpgroups[wgi].ArriveAndWait();
  if (wt == 0) {
    const int commits = g_protocol[threadIdx.x].commits;
    for (unsigned t = 1; t < 128; ++t) {
      EXPECT_EQ(g_protocol[threadIdx.x + t].commits, commits) << "the warpgroup's threads committed different groups";
    }
    size_t done = 0;  // the ops that complete: a prefix (groups in issue order)
    while (done < g.ops.size() && g.ops[done].group < commits - pending) ++done;
    for (size_t o = 0; o < g.ops.size(); ++o) {
      WgmmaOp& op = g.ops[o];
      EXPECT_EQ(op.issued, 128) << "an MMA not issued by all of its warpgroup's threads";
      for (int t = 0; t < 128; ++t) {
        EXPECT_TRUE(op.d[t] != nullptr && std::equal(op.d_at_issue[t].begin(), op.d_at_issue[t].end(), op.d[t]))
            << "thread " << t << " touched its accumulators while its MMA was in flight";
      }
      if (o >= done) continue;
      std::vector<float> a, b;
      ReadOperands(op, &a, &b);
      EXPECT_TRUE(a == op.a && b == op.b) << "an MMA's shared operand rewritten before it completed";
    }
    for (size_t o = 0; o < done; ++o) {
      WgmmaOp& op = g.ops[o];
      if (op.issued != 128) continue;
      std::vector<float> D(static_cast<size_t>(64 * op.n));
      for (int t = 0; t < 128; ++t) {
        const int w = t / 32, gq = (t % 32) / 4, c = t % 4;
        for (int i = 0; i < op.n / 2; ++i) {
          const int row = 16 * w + gq + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * c + (i & 1);
          D[row * op.n + col] = op.accumulate ? op.d[t][i] : 0.0f;
        }
      }
      for (int r = 0; r < 64; ++r) {
        for (int col = 0; col < op.n; ++col) {
          float s = D[r * op.n + col];
          for (int k = 0; k < 16; ++k) s = std::fma(op.a[r * 16 + k], op.b[k * op.n + col], s);
          D[r * op.n + col] = s;
        }
      }
      for (int t = 0; t < 128; ++t) {
        const int w = t / 32, gq = (t % 32) / 4, c = t % 4;
        for (int i = 0; i < op.n / 2; ++i) {
          const int row = 16 * w + gq + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * c + (i & 1);
          op.d[t][i] = D[row * op.n + col];
        }
      }
    }
    g.ops.erase(g.ops.begin(), g.ops.begin() + static_cast<std::ptrdiff_t>(done));
    // The MMAs still in flight: their accumulators as the completed ones left them (what the
    // next wait holds them to).
    for (WgmmaOp& op : g.ops) {
      for (int t = 0; t < 128; ++t) op.d_at_issue[t].assign(op.d[t], op.d[t] + op.n / 2);
    }
    std::fill(g.next.begin(), g.next.end(), static_cast<int>(g.ops.size()));
  }
  g_block->warpgroups[wgi].ArriveAndWait();
}

// A block's end: every MMA it issued has completed (an MMA in flight at the end writes
// registers that no longer belong to the kernel).
inline void ExpectWgmmaAwaited() {
  EXPECT_TRUE(g_wgmma[threadIdx.x / 128].ops.empty()) << "MMAs never waited for";
}

}  // namespace llmrt::emulation

namespace llmrt::cuda::wg {

inline constexpr bool kHaveWgmma = true;

// (The kernels' device form includes kernels/wgmma.cuh; these are its emulated counterparts.)
inline uint8_t* WgShared() { return emulation::g_block->shared; }
// The shared window's address of p: its offset in the block's shared memory, plus g_shared_skew
// (a test's stand-in for a base that is not 1024-byte aligned).
inline uint32_t g_shared_skew = 0;
inline uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(static_cast<const uint8_t*>(p) - emulation::g_block->shared) + g_shared_skew;
}
inline void WgFence() { emulation::g_protocol[threadIdx.x].fenced = true; }
inline void WgCommit() {
  emulation::g_protocol[threadIdx.x].uncommitted = 0;
  ++emulation::g_protocol[threadIdx.x].commits;
}
template <int kPending>
void WgWait() {
  emulation::WaitWgmma(kPending);
}
inline void WgWaitAll() { emulation::WaitWgmma(0); }
inline void FenceProxyAsync() {
  emulation::ThreadProtocol& p = emulation::g_protocol[threadIdx.x];
  p.copies_unfenced = false;
  p.proxy_fence_interval = emulation::g_block->bar.generation;
}
template <int kN>
inline void FenceOperands(float (&)[kN]) {}
inline void MmaM64N32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  emulation::IssueWgmma(d, 32, desc_a, desc_b, accumulate, false);
}
inline void MmaM64N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  emulation::IssueWgmma(d, 128, desc_a, desc_b, accumulate, false);
}
inline void MmaM64N256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  emulation::IssueWgmma(d, 256, desc_a, desc_b, accumulate, true);
}

// cp.async for the warpgroup kernels: fragment_emulation.h's copies, and a thread's copies
// issued since its last wait are its landed copies to fence (fence.proxy.async) before an MMA
// reads them (a wait_group that lands fewer of them only makes the check stricter).
inline std::vector<int> g_copies(1024, 0);
inline void CpAsync16(void* shared_dst, const void* global_src) {
  emulation::CpAsync16(shared_dst, global_src);
  ++g_copies[threadIdx.x];
}
inline void MarkLandedCopies() {
  if (g_copies[threadIdx.x] > 0) emulation::g_protocol[threadIdx.x].copies_unfenced = true;
  g_copies[threadIdx.x] = 0;
}
inline void CpAsyncWaitAll() {
  emulation::CpAsyncWaitAll();
  MarkLandedCopies();
}
inline void CpAsyncCommit() { emulation::CpAsyncCommit(); }
template <int kPending>
void CpAsyncWaitGroup() {
  emulation::CpAsyncWaitGroup<kPending>();
  MarkLandedCopies();
}

// A block's start, in each of its threads: a protocol state of its own (the block barrier's
// generation restarts at 0, so a fence recorded in the block before would hide a missing one).
inline void StartWgBlock() {
  emulation::g_protocol[threadIdx.x] = {};
  g_copies[threadIdx.x] = 0;
}

}  // namespace llmrt::cuda::wg

#endif  // LLMRT_TESTS_CUDA_EMULATION_WGMMA_EMULATION_H_
