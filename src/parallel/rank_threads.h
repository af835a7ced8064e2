// Runs one function per rank at once on persistent threads: rank 0 on the calling thread (the
// runtime's host thread), rank r > 0 on thread r. How a step fans out to in-process ranks.
#ifndef LLMRT_PARALLEL_RANK_THREADS_H_
#define LLMRT_PARALLEL_RANK_THREADS_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace llmrt {

class RankThreads {
 public:
  explicit RankThreads(int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int ranks() const { return ranks_; }
  // Calls fn(r) for every rank r concurrently and returns their statuses when all have returned.
  // An exception escaping fn becomes an INTERNAL status of that rank. REQUIRES: one Run at a
  // time.
  std::vector<absl::Status> Run(const std::function<absl::Status(int)>& fn);

 private:
  void Worker(int rank);
  static absl::Status Call(const std::function<absl::Status(int)>& fn, int rank);

  int ranks_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<absl::Status(int)>* fn_ = nullptr;
  std::vector<absl::Status> results_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace llmrt

#endif  // LLMRT_PARALLEL_RANK_THREADS_H_
