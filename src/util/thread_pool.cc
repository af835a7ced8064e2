#include "src/util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace llmrt {
namespace {

// How long a handoff polls before it sleeps. Long enough to bridge the gaps between the loops of
// a decode step (the host code between two ops, a few microseconds), short enough that an idle
// pool stops burning its cores almost at once.
constexpr auto kSpin = std::chrono::microseconds(200);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Threads of every live pool (the callers counted): the handoffs spin only while these fit the
// hardware threads; oversubscribed, a spinning thread would take the core from the one it waits for.
std::atomic<int> g_pool_threads{0};
bool SpinAllowed() {
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return g_pool_threads.load(std::memory_order_relaxed) <= cores;
}

// Polls done() until it holds (true) or kSpin has passed (false).
template <typename Done>
bool SpinUntil(Done done) {
  if (!SpinAllowed()) return done();
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  g_pool_threads.fetch_add(num_threads, std::memory_order_relaxed);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  g_pool_threads.fetch_sub(static_cast<int>(workers_.size()) + 1, std::memory_order_relaxed);
}

void ThreadPool::RunChunks() {
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) break;
    // Guided chunks: each takes 1 / (2 x threads) of what is left, in whole multiples of the
    // smallest chunk, so chunks shrink toward the end and the threads finish together (with
    // a fixed chunk, one thread idled for up to a chunk at the end of every loop: 4.3% of the
    // threads' time in batch-1 decode, 2.5% with these).
    size_t begin = next_.load(std::memory_order_relaxed);
    size_t end = 0;
    do {
      if (begin >= n_) break;
      const size_t want = std::max(chunk_, (n_ - begin) / divisor_);
      end = std::min(n_, begin + (want + chunk_ - 1) / chunk_ * chunk_);
    } while (!next_.compare_exchange_weak(begin, end, std::memory_order_relaxed));
    if (begin >= n_) break;
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
      break;
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
    }
    RunChunks();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be about to wait: notify under mu_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(size_t n, size_t min_chunk,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(1, min_chunk);
  size_t threads = workers_.size() + 1;
  // Nested or concurrent use, or too little work: run inline.
  if (workers_.empty() || n <= min_chunk || busy_.exchange(true)) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = min_chunk;
    divisor_ = 2 * threads;
    next_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    active_.store(workers_.size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  RunChunks();
  SpinUntil([&] { return active_.load(std::memory_order_acquire) == 0; });
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
    fn_ = nullptr;
    error = std::exchange(error_, nullptr);
  }
  busy_.store(false);
  if (error) std::rethrow_exception(error);
}

}  // namespace llmrt
