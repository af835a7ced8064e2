#include "src/parallel/in_process.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmrt {
namespace {

enum class Op : uint8_t { kAllReduceSum, kAllGather, kReduceScatterSum, kBroadcast, kBarrier };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduceSum: return "AllReduceSum";
    case Op::kAllGather: return "AllGather";
    case Op::kReduceScatterSum: return "ReduceScatterSum";
    case Op::kBroadcast: return "Broadcast";
    case Op::kBarrier: return "Barrier";
  }
  return "?";
}

// One rank's call, as the others see it.
struct Post {
  Op op = Op::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  int root = 0;
  bool failed = false;
};

std::string Describe(const Post& p) {
  std::string s = absl::StrCat(OpName(p.op), "(", p.count, " x ", DTypeName(p.dtype));
  if (p.op == Op::kBroadcast) absl::StrAppend(&s, ", root ", p.root);
  return s + ")";
}

}  // namespace

struct InProcessGroup::State {
  int size = 0;
  std::chrono::milliseconds timeout{0};
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> generation{0};  // bumped when every rank has arrived at a phase
  int arrived = 0;
  std::vector<uint8_t> present;  // [size]: arrived at the current phase
  std::vector<Post> posts;       // [size]: the current collective's calls
  std::vector<uint8_t> joined;   // [size]
  absl::Status broken;           // non-OK: the ranks are out of step; every collective fails
  absl::Status phase_status;     // verdict of the last post phase
  uint64_t collectives = 0;      // collectives begun (for messages)
  std::vector<float> scratch;    // sums of AllReduceSum, grown by the last rank to post

  // Waits until every rank has arrived at this phase. With `post`, this is a collective's first
  // phase: the last rank to arrive checks the calls agree and sets phase_status, which every
  // rank returns. Without, a data phase: OK unless the group broke.
  absl::Status Arrive(int rank, const Post* post) {
    std::unique_lock<std::mutex> lock(mu);
    if (!broken.ok()) return broken;
    if (post != nullptr) posts[rank] = *post;
    present[rank] = 1;
    const uint64_t gen = generation.load(std::memory_order_relaxed);
    if (++arrived == size) {
      if (post != nullptr) Judge();
      arrived = 0;
      std::fill(present.begin(), present.end(), 0);
      generation.store(gen + 1, std::memory_order_release);
      cv.notify_all();
      return post != nullptr ? phase_status : broken;
    }
    // A short spin first: ranks of one pass arrive within microseconds of each other.
    lock.unlock();
    for (int i = 0; i < 256 && generation.load(std::memory_order_acquire) == gen; ++i) std::this_thread::yield();
    lock.lock();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (generation.load(std::memory_order_relaxed) == gen && broken.ok()) {
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          generation.load(std::memory_order_relaxed) == gen && broken.ok()) {
        std::vector<int> missing;
        for (int r = 0; r < size; ++r) {
          if (!present[r]) missing.push_back(r);
        }
        broken = absl::DeadlineExceededError(absl::StrCat(
            "in-process collective #", collectives, " (", post != nullptr ? Describe(*post) : "data phase",
            "): rank(s) ", absl::StrJoin(missing, ", "), " of ", size, " did not join within ", timeout.count(),
            " ms; the rank group is no longer usable"));
        cv.notify_all();
      }
    }
    if (generation.load(std::memory_order_relaxed) == gen) return broken;
    return post != nullptr ? phase_status : absl::OkStatus();
  }

  // The last rank of a post phase: do the calls agree, did a rank fail, is there scratch.
  void Judge() {
    const uint64_t n = ++collectives;
    const Post& p0 = posts[0];
    for (int r = 1; r < size; ++r) {
      const Post& p = posts[r];
      if (p.op != p0.op || p.count != p0.count || p.dtype != p0.dtype || p.root != p0.root) {
        broken = absl::InvalidArgumentError(absl::StrCat("in-process collective #", n, ": rank 0 called ",
                                                         Describe(p0), " but rank ", r, " called ", Describe(p),
                                                         "; the rank group is no longer usable"));
        phase_status = broken;
        return;
      }
    }
    if ((p0.op == Op::kAllReduceSum || p0.op == Op::kReduceScatterSum) && p0.dtype != DType::kF32) {
      phase_status = absl::InvalidArgumentError(absl::StrCat("in-process collective #", n, ": ", Describe(p0),
                                                             " sums F32 values only"));
      return;
    }
    if (p0.op == Op::kBroadcast && (p0.root < 0 || p0.root >= size)) {
      phase_status = absl::InvalidArgumentError(absl::StrCat("in-process collective #", n, ": ", Describe(p0),
                                                             " names no rank of ", size));
      return;
    }
    for (int r = 0; r < size; ++r) {
      if (posts[r].failed) {
        phase_status = PeerFailureError(r, absl::StrCat("in-process collective #", n, " (", Describe(p0), ")"));
        return;
      }
    }
    if (p0.op == Op::kAllReduceSum && scratch.size() < p0.count) scratch.resize(p0.count);
    phase_status = absl::OkStatus();
  }
};

namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  std::string name() const override { return "in-process"; }

  absl::Status AllReduceSum(void* buf, size_t count, DType dtype, bool failed) override {
    Post p{Op::kAllReduceSum, buf, buf, count, dtype, 0, failed};
    if (absl::Status st = s_->Arrive(rank_, &p); !st.ok()) return st;
    // This rank's chunk of the sum, the ranks' values added in rank order.
    const size_t n = static_cast<size_t>(s_->size);
    const size_t b = count * rank_ / n, e = count * (rank_ + 1) / n;
    float* sum = s_->scratch.data();
    const float* first = static_cast<const float*>(s_->posts[0].in);
    std::memcpy(sum + b, first + b, (e - b) * sizeof(float));
    for (size_t r = 1; r < n; ++r) {
      const float* x = static_cast<const float*>(s_->posts[r].in);
      for (size_t i = b; i < e; ++i) sum[i] += x[i];
    }
    if (absl::Status st = s_->Arrive(rank_, nullptr); !st.ok()) return st;
    // The scratch stays untouched until every rank has posted its next collective.
    std::memcpy(buf, sum, count * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status AllGather(const void* in, void* out, size_t count, DType dtype, bool failed) override {
    Post p{Op::kAllGather, in, out, count, dtype, 0, failed};
    if (absl::Status st = s_->Arrive(rank_, &p); !st.ok()) return st;
    const size_t bytes = count * DTypeSize(dtype);
    for (int r = 0; r < s_->size; ++r) {
      std::memcpy(static_cast<uint8_t*>(out) + r * bytes, s_->posts[r].in, bytes);
    }
    return s_->Arrive(rank_, nullptr);  // every rank's input stays valid until all have copied it
  }

  absl::Status ReduceScatterSum(const void* in, void* out, size_t count, DType dtype, bool failed) override {
    Post p{Op::kReduceScatterSum, in, out, count, dtype, 0, failed};
    if (absl::Status st = s_->Arrive(rank_, &p); !st.ok()) return st;
    float* o = static_cast<float*>(out);
    const size_t at = count * rank_;
    std::memcpy(o, static_cast<const float*>(s_->posts[0].in) + at, count * sizeof(float));
    for (int r = 1; r < s_->size; ++r) {
      const float* x = static_cast<const float*>(s_->posts[r].in) + at;
      for (size_t i = 0; i < count; ++i) o[i] += x[i];
    }
    return s_->Arrive(rank_, nullptr);
  }

  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, bool failed) override {
    Post p{Op::kBroadcast, buf, buf, count, dtype, root, failed};
    if (absl::Status st = s_->Arrive(rank_, &p); !st.ok()) return st;
    if (rank_ != root) std::memcpy(buf, s_->posts[root].in, count * DTypeSize(dtype));
    return s_->Arrive(rank_, nullptr);
  }

  absl::Status Barrier() override {
    Post p{Op::kBarrier, nullptr, nullptr, 0, DType::kU8, 0, false};
    return s_->Arrive(rank_, &p);
  }

 private:
  std::shared_ptr<InProcessGroup::State> s_;
  int rank_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<InProcessGroup>> InProcessGroup::Create(int size, std::chrono::milliseconds timeout) {
  if (size < 1 || size > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("a rank group needs 1 to ", kMaxRanks, " ranks, not ", size));
  }
  if (timeout.count() <= 0) return absl::InvalidArgumentError("the collective timeout must be positive");
  auto s = std::make_shared<State>();
  s->size = size;
  s->timeout = timeout;
  s->present.assign(static_cast<size_t>(size), 0);
  s->posts.resize(static_cast<size_t>(size));
  s->joined.assign(static_cast<size_t>(size), 0);
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(std::move(s)));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return state_->size; }

absl::StatusOr<std::unique_ptr<Communicator>> InProcessGroup::Join(int rank) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (rank < 0 || rank >= state_->size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside the group of ", state_->size));
  }
  if (state_->joined[rank]) return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " already joined the group"));
  state_->joined[rank] = 1;
  return std::unique_ptr<Communicator>(new InProcessCommunicator(state_, rank));
}

}  // namespace llmrt
