#include "baselines.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <sys/mman.h>
#include <vector>

namespace llm_bench {

namespace {

using Clock = std::chrono::steady_clock;

// Best wall time of 4 runs of fn(thread index) on `threads` threads at once.
template <typename Fn>
double BestParallelSeconds(int threads, Fn fn) {
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { fn(i); });
    for (auto& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// bf16 is the top half of an IEEE binary32.
inline float Bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

constexpr int64_t kLanes = 8;
constexpr int64_t kRows = 4;

// out[r] = sum_i w[r * n + i] * x[i] for kRows consecutive rows of n values: kRows streams of
// weights in flight at once (one stream per core leaves memory bandwidth unused), each value of
// x loaded once for all rows. The kRows x kLanes partial sums are independent, so the unrolled
// inner loop maps onto vector registers without reassociating a float sum. Compiled for
// AVX-512, AVX2 and the baseline ISA, picked at load time by the CPU: at SSE2 width the loop is
// compute-bound below the memory bandwidth of common server cores. REQUIRES: n % kLanes == 0.
__attribute__((target_clones("avx512f", "avx2", "default"))) void DotBf16Rows(const uint16_t* w, const float* x,
                                                                              int64_t n, float* out) {
  const uint16_t* w0 = w;
  const uint16_t* w1 = w0 + n;
  const uint16_t* w2 = w1 + n;
  const uint16_t* w3 = w2 + n;
  float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
  for (int64_t i = 0; i < n; i += kLanes) {
#pragma GCC unroll 8
    for (int64_t j = 0; j < kLanes; ++j) {
      const float xv = x[i + j];
      a0[j] += Bf16ToFloat(w0[i + j]) * xv;
      a1[j] += Bf16ToFloat(w1[i + j]) * xv;
      a2[j] += Bf16ToFloat(w2[i + j]) * xv;
      a3[j] += Bf16ToFloat(w3[i + j]) * xv;
    }
  }
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t j = 0; j < kLanes; ++j) {
    s0 += a0[j];
    s1 += a1[j];
    s2 += a2[j];
    s3 += a3[j];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// Sum of n 64-bit words read as kRows streams at once (the quarters of the range, as the dot
// loop and the engine's one-row kernel read four weight rows): one stream per core leaves the
// memory's bandwidth unused on CPUs whose prefetchers follow several streams (a single stream
// read 15-18 GB/s where the four-row dot loop read 18-22 on the same Xeon). 4 x 8 independent
// accumulators: the adds map onto vector registers (integer adds reassociate freely), and the
// loop does nothing but read. Clones as DotBf16Rows. REQUIRES: n % (kRows * 8) == 0.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t SumWords(const uint64_t* p, int64_t n) {
  const int64_t q = n / kRows;
  const uint64_t* p0 = p;
  const uint64_t* p1 = p0 + q;
  const uint64_t* p2 = p1 + q;
  const uint64_t* p3 = p2 + q;
  uint64_t a[32] = {};
  for (int64_t i = 0; i < q; i += 8) {
#pragma GCC unroll 8
    for (int64_t j = 0; j < 8; ++j) {
      a[j] += p0[i + j];
      a[8 + j] += p1[i + j];
      a[16 + j] += p2[i + j];
      a[24 + j] += p3[i + j];
    }
  }
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

// `count` values of T in anonymous memory, filled with `value`; with huge_pages 2 MiB-aligned and
// advised for huge pages. data() is null when the mapping failed.
template <typename T>
class Buffer {
 public:
  Buffer(size_t count, T value, bool huge_pages) : count_(count) {
    constexpr size_t kHuge = size_t{2} << 20;
    bytes_ = count * sizeof(T) + kHuge;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = p;
    uintptr_t at = reinterpret_cast<uintptr_t>(p);
    if (huge_pages) {
      at = (at + kHuge - 1) / kHuge * kHuge;
#ifdef MADV_HUGEPAGE
      ::madvise(reinterpret_cast<void*>(at), count * sizeof(T), MADV_HUGEPAGE);
#endif
    } else {
#ifdef MADV_NOHUGEPAGE
      ::madvise(p, bytes_, MADV_NOHUGEPAGE);
#endif
    }
    data_ = reinterpret_cast<T*>(at);
    std::fill(data_, data_ + count, value);
  }
  ~Buffer() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  void* base_ = nullptr;
  T* data_ = nullptr;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace

double ReadStreamBandwidth(int threads, bool huge_pages) {
  const size_t words = (size_t{1} << 30) / 8;
  Buffer<uint64_t> buf(words, 1, huge_pages);
  if (buf.data() == nullptr) return 0;
  const size_t chunk = words / threads / 32 * 32;
  std::vector<uint64_t> sums(threads);
  const double best = BestParallelSeconds(threads, [&](int i) {
    const size_t end = i == threads - 1 ? words : (i + 1) * chunk;
    sums[i] = SumWords(buf.data() + i * chunk, static_cast<int64_t>(end - i * chunk));
  });
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  // Every word is 1: a wrong sum means the loop was not the one timed.
  if (total != words) return 0;
  return words * 8.0 / best / 1e9;
}

double MemcpyBandwidth(int threads, bool huge_pages, double* read_only_gbs) {
  const size_t bytes = size_t{1} << 30;
  Buffer<uint8_t> src(bytes, 1, huge_pages), dst(bytes, 0, huge_pages);
  *read_only_gbs = 0;
  if (src.data() == nullptr || dst.data() == nullptr) return 0;
  const size_t chunk = bytes / threads;
  const double best = BestParallelSeconds(threads, [&](int i) {
    std::memcpy(dst.data() + i * chunk, src.data() + i * chunk, chunk);
  });
  *read_only_gbs = bytes / best / 1e9;
  return 2.0 * bytes / best / 1e9;
}

double Bf16DotStreamBandwidth(int threads, bool huge_pages) {
  const int64_t K = 4096, rows = (int64_t{1} << 30) / (2 * K);
  Buffer<uint16_t> w(static_cast<size_t>(rows * K), 0x3f00, huge_pages);  // bf16 0.5
  if (w.data() == nullptr) return 0;
  std::vector<float> x(K, 1.0f), out(rows);
  const int64_t chunk = rows / threads / kRows * kRows;
  const double best = BestParallelSeconds(threads, [&](int i) {
    const int64_t end = i == threads - 1 ? rows : (i + 1) * chunk;
    for (int64_t r = i * chunk; r < end; r += kRows) DotBf16Rows(w.data() + r * K, x.data(), K, out.data() + r);
  });
  return w.size() * 2.0 / best / 1e9;
}

}  // namespace llm_bench
