// Runs a CUDA kernel's body on the host, one block at a time, each CUDA thread a fiber (ucontext)
// of one host thread, scheduled round-robin: __syncthreads is a barrier of the block's fibers (a
// fiber yields until the last one arrives), warp shuffles exchange through a warp's slots
// between two barriers of its 32 fibers. Deterministic, and exact in what it checks: which
// thread reads and writes what, in which order barriers allow. A barrier some fibers never reach
// (a divergent __syncthreads) is reported as a deadlock. The tensor-core instructions are
// emulated by their PTX fragment tables in the test that uses them
// (attention_tc_emulation_test.cc), not here.
#ifndef LLMRT_TESTS_CUDA_EMULATION_CUDA_EMULATION_H_
#define LLMRT_TESTS_CUDA_EMULATION_CUDA_EMULATION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <ucontext.h>

#include "tests/cuda_emulation/fake/cuda_runtime_api.h"

#define __device__
#define __global__ inline  // kernel bodies in headers: one definition for every test file
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)
// A kernel's static shared arrays: one instance, which the blocks (run one after another) reuse,
// kept in a section of their own so that RunGrid fills them with 0xff bytes before every block,
// as it fills the dynamic shared memory (the linker names the section's bounds).
#define __shared__ static __attribute__((section("llmrt_emulated_shared")))
extern "C" __attribute__((weak)) unsigned char __start_llmrt_emulated_shared[];  // NOLINT (the linker's names;
extern "C" __attribute__((weak)) unsigned char __stop_llmrt_emulated_shared[];   // NOLINT null where none)

namespace llmrt::emulation {

struct Index3 {
  unsigned x = 0, y = 0, z = 0;
};

// A barrier of n fibers.
struct Barrier {
  unsigned n = 0, count = 0;
  uint64_t generation = 0;
  void ArriveAndWait();
};

// One warp's exchange slots and barrier.
struct Warp {
  Barrier bar{32};
  uint32_t words[32][8] = {};
  const void* ptrs[32] = {};
  uint64_t slots[32] = {};  // shuffles
};

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<uint8_t[]> stack;  // uninitialized: only the pages a fiber touches are used
  bool done = false;
  bool at_block_barrier = false;  // waiting in __syncthreads
};

// The order fibers run in. kRoundRobin: each in turn, so the warps advance together between
// their barriers. kReverse: the same from the last thread down, so that a thread reading what a
// higher thread writes without a barrier between (which round robin happens to order) reads
// stale data. kGroupsInOrder: the threads of group 0 (g_group_threads of them: a warp, a
// warpgroup) run until each waits at a __syncthreads or ends, then group 1's, ...: a group runs
// far ahead of the others, so a missing barrier between groups shows.
enum class Schedule { kRoundRobin, kReverse, kGroupsInOrder };
// LLMRT_EMULATION_SCHEDULE in the environment chooses the schedule every kernel runs under (the
// tests that choose one for a kernel restore this one after): "roundrobin" (the default),
// "reverse", "warps" (groups of 32 in order) or "warpgroups" (groups of 128). ctest runs the
// suite under each.
struct ScheduleChoice {
  Schedule schedule = Schedule::kRoundRobin;
  unsigned group_threads = 128;
};
inline ScheduleChoice ScheduleFromEnvironment() {
  const char* v = std::getenv("LLMRT_EMULATION_SCHEDULE");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "roundrobin") == 0) return {};
  if (std::strcmp(v, "reverse") == 0) return {Schedule::kReverse, 128};
  if (std::strcmp(v, "warps") == 0) return {Schedule::kGroupsInOrder, 32};
  if (std::strcmp(v, "warpgroups") == 0) return {Schedule::kGroupsInOrder, 128};
  std::fprintf(stderr, "LLMRT_EMULATION_SCHEDULE=%s: expected roundrobin, reverse, warps or warpgroups\n", v);
  std::abort();
}
inline const ScheduleChoice g_default_schedule = ScheduleFromEnvironment();
inline Schedule g_schedule = g_default_schedule.schedule;
inline unsigned g_group_threads = g_default_schedule.group_threads;
// Restores the environment's schedule (for tests that run a kernel under several).
inline void RestoreDefaultSchedule() {
  g_schedule = g_default_schedule.schedule;
  g_group_threads = g_default_schedule.group_threads;
}
inline constexpr size_t kFiberStack = 128 * 1024;

// The block being run.
struct Block {
  Barrier bar;
  std::vector<Warp> warps;
  std::vector<Barrier> warpgroups;  // a barrier of each 128 threads (4 warps)
  uint8_t* shared = nullptr;        // 1024-byte aligned, as the swizzled layouts need
  size_t shared_bytes = 0;
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  uint64_t progress = 0;  // barriers completed and fibers finished
  uint64_t released = 0;  // the block barrier's last generation whose waiters were released
};

inline Block* g_block = nullptr;

inline Warp& ThisWarp();

// Runs body() on `threads` fibers (a multiple of 32) as one block with `shared_bytes` of shared
// memory (filled with 0xff bytes: a float NaN, a bfloat16 NaN, so that reading what no thread
// wrote shows), for each block index in grid (x fastest). Aborts on a barrier deadlock.
void RunGrid(Index3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& body);

}  // namespace llmrt::emulation

inline llmrt::emulation::Index3 threadIdx;
inline llmrt::emulation::Index3 blockIdx;
inline llmrt::emulation::Index3 blockDim;

inline void __syncthreads() {
  llmrt::emulation::Block* b = llmrt::emulation::g_block;
  b->current->at_block_barrier = true;
  b->bar.ArriveAndWait();
  if (b->released != b->bar.generation) {  // the first thread through: every waiter may run
    for (llmrt::emulation::Fiber& f : b->fibers) f.at_block_barrier = false;
    b->released = b->bar.generation;
  }
  b->current->at_block_barrier = false;
}

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float __int_as_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
// Each rounded on its own (the volatile keeps the host compiler from fusing them).
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}

namespace llmrt::emulation {

// Lane l receives lane from(l)'s value, through the warp's exchange slots (all 32 lanes take part).
template <typename T, typename From>
T Exchange(T v, From from) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "one slot a lane");
  Warp& w = ThisWarp();
  const unsigned lane = threadIdx.x % 32;
  std::memcpy(&w.slots[lane], &v, sizeof(T));
  w.bar.ArriveAndWait();
  T r;
  std::memcpy(&r, &w.slots[from(lane)], sizeof(T));
  w.bar.ArriveAndWait();
  return r;
}

// Lane l receives lane l ^ lane_mask's value.
template <typename T>
T ShuffleXor(T v, int lane_mask) {
  return Exchange(v, [&](unsigned l) { return l ^ static_cast<unsigned>(lane_mask); });
}
// Lane l receives lane l - delta's value (its own where l < delta).
template <typename T>
T ShuffleUp(T v, unsigned delta) {
  return Exchange(v, [&](unsigned l) { return l >= delta ? l - delta : l; });
}

}  // namespace llmrt::emulation

inline float __shfl_xor_sync(unsigned /*mask*/, float v, int m) { return llmrt::emulation::ShuffleXor(v, m); }
inline int32_t __shfl_xor_sync(unsigned /*mask*/, int32_t v, int m) { return llmrt::emulation::ShuffleXor(v, m); }
inline double __shfl_xor_sync(unsigned /*mask*/, double v, int m) { return llmrt::emulation::ShuffleXor(v, m); }
inline int32_t __shfl_up_sync(unsigned /*mask*/, int32_t v, unsigned d) { return llmrt::emulation::ShuffleUp(v, d); }
inline double __shfl_up_sync(unsigned /*mask*/, double v, unsigned d) { return llmrt::emulation::ShuffleUp(v, d); }

// The lanes (all 32 take part) whose value equals this lane's.
inline unsigned __match_any_sync(unsigned /*mask*/, int32_t v) {
  llmrt::emulation::Warp& w = llmrt::emulation::ThisWarp();
  const unsigned lane = threadIdx.x % 32;
  w.words[lane][7] = static_cast<uint32_t>(v);
  w.bar.ArriveAndWait();
  unsigned same = 0;
  for (unsigned l = 0; l < 32; ++l) same |= (w.words[l][7] == static_cast<uint32_t>(v) ? 1u : 0u) << l;
  w.bar.ArriveAndWait();
  return same;
}

inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) { llmrt::emulation::ThisWarp().bar.ArriveAndWait(); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
using std::isnan;  // CUDA's math functions are global
inline int __ffs(int v) { return __builtin_ffs(v); }
template <typename T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
  return a < b ? b : a;
}

inline int32_t atomicAdd(int32_t* p, int32_t v) {  // fibers never preempt
  const int32_t old = *p;
  *p = old + v;
  return old;
}

inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {  // fibers never preempt
  const unsigned long long old = *p;
  if (v < old) *p = v;
  return old;
}

inline int32_t atomicMin(int32_t* p, int32_t v) {  // fibers never preempt
  const int32_t old = *p;
  if (v < old) *p = v;
  return old;
}

inline int32_t atomicCAS(int32_t* p, int32_t compare, int32_t value) {  // fibers never preempt
  const int32_t old = *p;
  if (old == compare) *p = value;
  return old;
}

namespace llmrt::emulation {

inline Warp& ThisWarp() { return g_block->warps[threadIdx.x / 32]; }

inline void Barrier::ArriveAndWait() {
  const uint64_t mine = generation;
  if (++count == n) {
    count = 0;
    ++generation;
    ++g_block->progress;
    return;
  }
  while (generation == mine) swapcontext(&g_block->current->context, &g_block->scheduler);
}

inline void FiberMain() {
  (*g_block->body)();
  g_block->current->done = true;
  ++g_block->progress;
}  // returns to uc_link: the scheduler

// Bytes past a block's dynamic shared memory that must still hold their 0xff filling when the
// block ends: a kernel that writes past what its launch gives it aborts the test.
inline constexpr size_t kSharedGuard = 64 * 1024;

inline void RunGrid(Index3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& body) {
  std::vector<uint8_t> shared(shared_bytes + 1024 + kSharedGuard);
  uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared.data()) + 1023) & ~uintptr_t{1023});
  Block block;
  block.fibers.resize(threads);
  for (Fiber& f : block.fibers) f.stack.reset(new uint8_t[kFiberStack]);
  g_block = &block;
  for (unsigned z = 0; z < (grid.z == 0 ? 1 : grid.z); ++z) {
    for (unsigned y = 0; y < (grid.y == 0 ? 1 : grid.y); ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(aligned, 0xff, shared_bytes + kSharedGuard);
        std::memset(__start_llmrt_emulated_shared, 0xff,
                    static_cast<size_t>(__stop_llmrt_emulated_shared - __start_llmrt_emulated_shared));
        block.bar = Barrier{threads};
        block.warps = std::vector<Warp>(threads / 32);
        block.warpgroups = std::vector<Barrier>((threads + 127) / 128, Barrier{128});
        block.shared = aligned;
        block.shared_bytes = shared_bytes;
        block.released = block.bar.generation;
        block.body = &body;
        for (Fiber& f : block.fibers) {
          f.done = false;
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = f.stack.get();
          f.context.uc_stack.ss_size = kFiberStack;
          f.context.uc_link = &block.scheduler;
          makecontext(&f.context, FiberMain, 0);
        }
        blockIdx = Index3{x, y, z};
        blockDim = Index3{threads, 1, 1};
        const auto run = [&](unsigned t) {
          threadIdx = Index3{t, 0, 0};
          block.current = &block.fibers[t];
          swapcontext(&block.scheduler, &block.fibers[t].context);
        };
        for (bool running = true; running;) {
          running = false;
          const uint64_t before = block.progress;
          if (g_schedule == Schedule::kGroupsInOrder) {
            // Each group in turn until all its threads wait at the block's barrier or end.
            for (unsigned g0 = 0; g0 < threads; g0 += g_group_threads) {
              const unsigned g1 = std::min(threads, g0 + g_group_threads);
              for (bool busy = true; busy;) {
                busy = false;
                const uint64_t group_before = block.progress;
                for (unsigned t = g0; t < g1; ++t) {
                  Fiber& f = block.fibers[t];
                  if (f.done || f.at_block_barrier) continue;
                  busy = running = true;
                  run(t);
                }
                if (busy && block.progress == group_before) break;  // waiting on another group
              }
            }
          } else {
            for (unsigned i = 0; i < threads; ++i) {
              const unsigned t = g_schedule == Schedule::kReverse ? threads - 1 - i : i;
              Fiber& f = block.fibers[t];
              if (f.done) continue;
              running = true;
              run(t);
            }
          }
          if (running && block.progress == before) {
            std::fprintf(stderr, "emulated block (%u, %u, %u): barrier deadlock\n", x, y, z);
            std::abort();
          }
        }
        for (size_t i = 0; i < kSharedGuard; ++i) {
          if (aligned[shared_bytes + i] != 0xff) {
            std::fprintf(stderr, "emulated block (%u, %u, %u): wrote %zu bytes past its %zu bytes of shared memory\n", x,
                         y, z, i + 1, shared_bytes);
            std::abort();
          }
        }
      }
    }
  }
  g_block = nullptr;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for the calling warp, from the PTX ISA's
// fragment tables (g = lane / 4, c = lane % 4; register i holds elements 2i (low half) and 2i+1):
//   A (16x16): a0,a1 row g cols 2c,2c+1; a2,a3 row g+8; a4,a5 row g cols 2c+8,2c+9; a6,a7 row g+8
//   B (16x8):  b0,b1 rows 2c,2c+1 col g; b2,b3 rows 2c+8,2c+9 col g
//   C (16x8):  c0,c1 row g cols 2c,2c+1; c2,c3 row g+8
// Each output adds its 16 exact products to d in k order (float32 fma).
inline float Bf16Half(uint32_t reg, int e) { return __uint_as_float(((reg >> (16 * e)) & 0xffffu) << 16); }

inline void Mma16816Bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  Warp& w = ThisWarp();
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = 0; i < 4; ++i) w.words[lane][i] = a[i];
  w.words[lane][4] = b0;
  w.words[lane][5] = b1;
  w.bar.ArriveAndWait();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, c = l & 3;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * c + e] = Bf16Half(w.words[l][0], e);
      A[g + 8][2 * c + e] = Bf16Half(w.words[l][1], e);
      A[g][2 * c + 8 + e] = Bf16Half(w.words[l][2], e);
      A[g + 8][2 * c + 8 + e] = Bf16Half(w.words[l][3], e);
      B[2 * c + e][g] = Bf16Half(w.words[l][4], e);
      B[2 * c + 8 + e][g] = Bf16Half(w.words[l][5], e);
    }
  }
  w.bar.ArriveAndWait();
  const int g = lane >> 2, c = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * c + (i & 1);
    float s = d[i];
    for (int k = 0; k < 16; ++k) s = std::fma(A[row][k], B[k][col], s);
    d[i] = s;
  }
}

}  // namespace llmrt::emulation

// The kernels' helper for their dynamic shared memory (kernels/common.cuh has the device one).
#define LLMRT_CUDA_EMULATION 1
namespace llmrt::cuda {
template <typename T>
inline T* DynamicShared() {
  return reinterpret_cast<T*>(emulation::g_block->shared);
}
}  // namespace llmrt::cuda

#endif  // LLMRT_TESTS_CUDA_EMULATION_CUDA_EMULATION_H_
