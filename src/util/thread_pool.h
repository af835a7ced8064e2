// A fixed pool of worker threads for data-parallel loops. The calling thread takes part, so a
// pool of N threads runs N-1 workers. Not reentrant: a ParallelFor body must not call
// ParallelFor on the same pool (nested calls run inline instead). Exception-safe: an exception
// thrown by a chunk on any thread stops the remaining chunks and is rethrown to the caller of
// ParallelFor once every thread has left the loop.
//
// Handoffs spin before they sleep: a worker that finished a loop polls for the next one for a
// while (kSpin) before it waits on the condition variable, and the caller polls for the workers'
// completion the same way. A decode step runs tens of loops back to back, and waking a sleeping
// thread (a futex wake, on a virtual machine an interrupt to a halted vCPU) costs tens of
// microseconds per loop; an idle pool still sleeps once the spin runs out. Handoffs do not spin
// while the live pools hold more threads than the machine has hardware threads.
#ifndef LLMRT_UTIL_THREAD_POOL_H_
#define LLMRT_UTIL_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llmrt {

class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into chunks of whole multiples of min_chunk items
  // (the last may be shorter), largest first, spread over all threads; returns when every chunk
  // is done. If a chunk throws, chunks not yet started
  // are skipped and the first exception is rethrown here.
  void ParallelFor(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t chunk_ = 1;    // the smallest chunk
  size_t divisor_ = 2;  // a chunk is (items left) / divisor_, at least chunk_
  std::atomic<size_t> next_{0};
  std::atomic<size_t> active_{0};  // workers still in the current loop
  std::exception_ptr error_;  // first exception of the current loop (guarded by mu_)
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> generation_{0};  // written under mu_; read by spinning workers without it
  bool stop_ = false;
  std::atomic<bool> busy_{false};
};

}  // namespace llmrt

#endif  // LLMRT_UTIL_THREAD_POOL_H_
