// The in-process communicator: every collective against a scalar reference on every rank,
// bit-identical results across ranks and runs, and every failure a status (missing rank,
// mismatched calls, failed peer, bad sizes), never a hang.
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/parallel/in_process.h"

namespace llmrt {
namespace {

using std::chrono::milliseconds;

// Runs body(rank, comm) on one thread per rank of a new group of `size`.
void RunRanks(int size, const std::function<void(int, Communicator&)>& body, milliseconds timeout = milliseconds(20000)) {
  auto group = InProcessGroup::Create(size, timeout);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) {
    auto c = (*group)->Join(r);
    ASSERT_TRUE(c.ok()) << c.status();
    comms.push_back(std::move(*c));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r, *comms[r]); });
  for (auto& t : threads) t.join();
}

// Values whose float sum depends on the order they are added in.
std::vector<float> RankValues(int rank, size_t n, uint32_t seed) {
  std::mt19937 rng(seed * 977 + rank);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = u(rng) * std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);
  return v;
}

class InProcessSizes : public ::testing::TestWithParam<int> {};

TEST_P(InProcessSizes, AllReduceSumAddsInRankOrderIdenticallyOnEveryRank) {
  const int size = GetParam();
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{17}, size_t{1000}}) {
    std::vector<float> want(n, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      float s = RankValues(0, n, 1)[i];
      for (int r = 1; r < size; ++r) s += RankValues(r, n, 1)[i];
      want[i] = s;
    }
    std::vector<std::vector<float>> got(size);
    RunRanks(size, [&](int r, Communicator& c) {
      std::vector<float> v = RankValues(r, n, 1);
      ASSERT_TRUE(c.AllReduceSum(v.data(), n, DType::kF32).ok());
      got[r] = v;
    });
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(got[r].size(), n);
      EXPECT_EQ(std::memcmp(got[r].data(), want.data(), n * sizeof(float)), 0) << "rank " << r << " n " << n;
    }
  }
}

TEST_P(InProcessSizes, AllGatherReduceScatterBroadcastBarrier) {
  const int size = GetParam();
  const size_t n = 13;
  RunRanks(size, [&](int r, Communicator& c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), size);
    // AllGather of int32 values: rank q contributes q * 1000 + i.
    std::vector<int32_t> in(n), out(n * size, -1);
    for (size_t i = 0; i < n; ++i) in[i] = r * 1000 + static_cast<int32_t>(i);
    ASSERT_TRUE(c.AllGather(in.data(), out.data(), n, DType::kI32).ok());
    for (int q = 0; q < size; ++q) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[q * n + i], q * 1000 + static_cast<int32_t>(i));
    }
    // ReduceScatterSum: rank r receives chunk r of the rank-ordered sum.
    std::vector<float> full = RankValues(r, n * size, 2), mine(n);
    ASSERT_TRUE(c.ReduceScatterSum(full.data(), mine.data(), n, DType::kF32).ok());
    for (size_t i = 0; i < n; ++i) {
      float s = RankValues(0, n * size, 2)[r * n + i];
      for (int q = 1; q < size; ++q) s += RankValues(q, n * size, 2)[r * n + i];
      ASSERT_EQ(mine[i], s);
    }
    // Broadcast from the last rank.
    std::vector<uint8_t> b(n, static_cast<uint8_t>(r));
    ASSERT_TRUE(c.Broadcast(b.data(), n, DType::kU8, size - 1).ok());
    for (uint8_t v : b) ASSERT_EQ(v, size - 1);
    ASSERT_TRUE(c.Barrier().ok());
  });
}

TEST_P(InProcessSizes, ManyCollectivesInARowStayInStep) {
  const int size = GetParam();
  RunRanks(size, [&](int r, Communicator& c) {
    for (int k = 0; k < 500; ++k) {
      float v[2] = {static_cast<float>(r + k), 1.0f};
      ASSERT_TRUE(c.AllReduceSum(v, 2, DType::kF32).ok());
      ASSERT_EQ(v[1], static_cast<float>(size));
      ASSERT_EQ(v[0], static_cast<float>(size * k + size * (size - 1) / 2));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcessSizes, ::testing::Values(1, 2, 3, 4, 8));

TEST(InProcess, GroupSizeAndRanksAreChecked) {
  for (int bad : {0, -1, InProcessGroup::kMaxRanks + 1}) {
    auto g = InProcessGroup::Create(bad);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(std::to_string(bad)), std::string::npos) << g.status();
  }
  auto g = InProcessGroup::Create(2);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE((*g)->Join(2).ok());
  EXPECT_FALSE((*g)->Join(-1).ok());
  ASSERT_TRUE((*g)->Join(1).ok());
  auto again = (*g)->Join(1);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already joined"), std::string::npos);
}

TEST(InProcess, ARankThatNeverJoinsTimesOutWithTheMissingRankNamed) {
  auto g = InProcessGroup::Create(3, milliseconds(200));
  ASSERT_TRUE(g.ok());
  auto c0 = (*g)->Join(0);
  auto c1 = (*g)->Join(1);
  ASSERT_TRUE(c0.ok() && c1.ok());
  absl::Status s1;
  std::thread t([&] {
    float v = 1;
    s1 = (*c1)->AllReduceSum(&v, 1, DType::kF32);
  });
  const auto t0 = std::chrono::steady_clock::now();
  float v = 1;
  const absl::Status s0 = (*c0)->AllReduceSum(&v, 1, DType::kF32);
  t.join();
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s0.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s1.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s0.message().find("rank(s) 2 of 3 did not join"), std::string::npos) << s0;
  EXPECT_LT(waited, std::chrono::seconds(5));
  // The ranks are out of step now: every later collective fails at once.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ((*c0)->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, milliseconds(100));
}

TEST(InProcess, MismatchedCallsFailOnEveryRankNamingBoth) {
  std::vector<absl::Status> st(2);
  RunRanks(2, [&](int r, Communicator& c) {
    std::vector<float> v(8, 1.0f);
    st[r] = c.AllReduceSum(v.data(), r == 0 ? 4 : 8, DType::kF32);
  });
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("rank 0 called AllReduceSum(4 x F32) but rank 1 called AllReduceSum(8 x F32)"),
              std::string::npos)
        << s;
  }
  RunRanks(2, [&](int r, Communicator& c) {
    std::vector<float> v(4, 1.0f);
    st[r] = r == 0 ? c.AllReduceSum(v.data(), 4, DType::kF32) : c.AllGather(v.data(), v.data(), 2, DType::kF32);
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st[1].message().find("AllGather"), std::string::npos);
  RunRanks(2, [&](int r, Communicator& c) {
    std::vector<int32_t> v(4, 1);
    st[r] = c.AllReduceSum(v.data(), 4, DType::kI32);
  });
  EXPECT_NE(st[0].message().find("sums F32 values only"), std::string::npos) << st[0];
}

TEST(InProcess, AFailedRankMakesTheCollectiveFailEverywhereWithoutMovingData) {
  std::vector<absl::Status> st(3);
  std::vector<std::vector<float>> after(3);
  std::vector<absl::Status> next(3);
  RunRanks(3, [&](int r, Communicator& c) {
    std::vector<float> v(5, static_cast<float>(r + 1));
    st[r] = c.AllReduceSum(v.data(), v.size(), DType::kF32, /*failed=*/r == 1);
    after[r] = v;
    // The group stays usable for the next pass.
    float one = 1;
    next[r] = c.AllReduceSum(&one, 1, DType::kF32);
    if (next[r].ok()) {
      EXPECT_EQ(one, 3.0f);
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(IsPeerFailure(st[r])) << st[r];
    EXPECT_NE(st[r].message().find("rank 1 failed"), std::string::npos);
    EXPECT_EQ(after[r], std::vector<float>(5, static_cast<float>(r + 1)));
    EXPECT_TRUE(next[r].ok()) << next[r];
  }
  EXPECT_FALSE(IsPeerFailure(absl::InternalError("x")));
}

}  // namespace
}  // namespace llmrt
