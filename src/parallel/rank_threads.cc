#include "src/parallel/rank_threads.h"

#include <exception>
#include <new>

#include "absl/strings/str_cat.h"

namespace llmrt {

RankThreads::RankThreads(int ranks) : ranks_(ranks < 1 ? 1 : ranks), results_(static_cast<size_t>(ranks_)) {
  for (int r = 1; r < ranks_; ++r) threads_.emplace_back([this, r] { Worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

absl::Status RankThreads::Call(const std::function<absl::Status(int)>& fn, int rank) {
  try {
    return fn(rank);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("rank ", rank, ": out of host memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("rank ", rank, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("rank ", rank, ": unknown exception"));
  }
}

void RankThreads::Worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<absl::Status(int)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    absl::Status st = Call(*fn, rank);
    std::lock_guard<std::mutex> lock(mu_);
    results_[rank] = std::move(st);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

std::vector<absl::Status> RankThreads::Run(const std::function<absl::Status(int)>& fn) {
  if (ranks_ == 1) return {Call(fn, 0)};
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = ranks_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  absl::Status mine = Call(fn, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  results_[0] = std::move(mine);
  fn_ = nullptr;
  return results_;
}

}  // namespace llmrt
