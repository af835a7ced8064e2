// The sampling kernels (kernels/sampling_kernels.cuh) run on the host with emulated threads,
// against the host's SampleRow (src/backend/sampling.h). The launch sequence of
// kernels/sampling.cu is replayed here: the greedy rows' arg-max; the fast path (radix select of
// the best candidates, bitonic sort in shared memory, the walk); for the rows it hands on, CUB's
// stable descending segmented sort (done here by std::stable_sort) and the walk over the whole
// sorted row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/sampling.h"
#include "tests/cuda_emulation/cuda_emulation.h"
#include "kernels/sampling_kernels.cuh"

namespace llmrt::cuda {
namespace {

struct Row {
  std::vector<float> logits;
  SamplingParams params;
  double draw = 0.0;
};

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<bool> fast;  // per row: sampled by SampleFastKernel
};

// The device's sequence over rows of V logits (each row its own parameters).
Outcome RunDevice(const std::vector<Row>& rows, int64_t V) {
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> logits(static_cast<size_t>(R * V));
  std::vector<int32_t> params(static_cast<size_t>(R * kSamplingParamWords));
  std::vector<int32_t> random_rows;
  for (int64_t r = 0; r < R; ++r) {
    std::copy(rows[r].logits.begin(), rows[r].logits.end(), logits.begin() + r * V);
    PackSamplingRow(rows[r].params, rows[r].draw, params.data() + r * kSamplingParamWords);
    if (SamplingDraws(rows[r].params, V)) random_rows.push_back(static_cast<int32_t>(r));
  }
  Outcome out;
  out.ids.assign(static_cast<size_t>(R), -7);
  out.fast.assign(static_cast<size_t>(R), false);
  const ConstMat m{logits.data(), R, V, V};
  emulation::RunGrid({static_cast<unsigned>(R), 1, 1}, smp::kArgmaxThreads, 0,
                     [&] { smp::ArgmaxKernel(m, params.data(), out.ids.data()); });
  const int64_t num_random = static_cast<int64_t>(random_rows.size());
  for (int64_t first = 0; first < num_random; first += kSampleRowsPerPass) {
    const int64_t n = std::min(num_random - first, kSampleRowsPerPass);
    std::vector<float> keys_in(static_cast<size_t>(n * V), NAN), keys_out(keys_in.size(), NAN);
    std::vector<int32_t> vals_in(keys_in.size(), -1), vals_out(keys_in.size(), -1);
    std::vector<int64_t> begin(static_cast<size_t>(n), -1), end(static_cast<size_t>(n), -1);
    emulation::RunGrid({static_cast<unsigned>(n), 1, 1}, smp::kFastThreads, 0, [&] {
      smp::SampleFastKernel(m, params.data(), random_rows.data(), first, keys_in.data(), vals_in.data(), begin.data(),
                            end.data(), out.ids.data());
    });
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(begin[j], j * V);
      out.fast[random_rows[first + j]] = end[j] == begin[j];
      if (end[j] == begin[j]) continue;
      EXPECT_EQ(end[j], begin[j] + V);
      std::vector<int32_t> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      const float* k = keys_in.data() + j * V;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return k[a] > k[b]; });
      for (int64_t i = 0; i < V; ++i) {
        keys_out[j * V + i] = k[order[i]];
        vals_out[j * V + i] = vals_in[j * V + order[i]];
      }
    }
    emulation::RunGrid({static_cast<unsigned>(n), 1, 1}, smp::kSortedThreads, 0, [&] {
      smp::SampleSortedKernel(keys_out.data(), vals_out.data(), V, params.data(), random_rows.data(), first,
                              begin.data(), end.data(), out.ids.data());
    });
  }
  return out;
}

enum Kind { kPeaked, kFlat, kFewValues, kSpecials };

std::vector<float> Logits(Kind kind, int64_t V, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(V));
  for (float& v : x) {
    switch (kind) {
      case kPeaked: v = 3.0f * normal(rng); break;  // a trained model's spread: mass on a few hundred
      case kFlat: v = 0.05f * normal(rng); break;   // an untrained one's: nearly uniform
      case kFewValues: v = static_cast<float>(static_cast<int>(rng() % 6)) * 1.5f; break;
      case kSpecials: {
        const uint32_t r = rng() % 64;
        v = r == 0 ? NAN : r == 1 ? -INFINITY : r == 2 ? -0.0f : r == 3 ? 0.0f : 3.0f * normal(rng);
        break;
      }
    }
  }
  return x;
}

// The position of token `id` in the host's order of candidates (logit descending, NaN as
// -infinity, index ascending).
int64_t HostRank(const std::vector<float>& logits, int32_t id) {
  const auto key = [&](int64_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  int64_t rank = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(logits.size()); ++i) {
    rank += key(i) > key(id) || (key(i) == key(id) && i < id) ? 1 : 0;
  }
  return rank;
}

// Every drawing row's token is the host's: over a grid of temperature, top_k (none, 1, within
// the 2,048 candidates, exactly 2,048, past them), top_p (none, 0.9, 0.5) and min_p (none, 0.05)
// and logits peaked like a trained model's, nearly flat, with many ties, and with NaN, -infinity
// and signed zeros; greedy rows are the arg-max. Rows with top_k within the candidates always take
// the fast path, and so do the peaked rows; a row with neither top_p nor min_p takes it exactly
// where the host's token is among its best 2,048 candidates.
TEST(SamplingEmulated, EveryRowSamplesTheHostsToken) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t V = 4000;
  for (const Kind kind : {kPeaked, kFlat, kFewValues, kSpecials}) {
    SCOPED_TRACE(::testing::Message() << "kind " << kind);
    std::vector<Row> rows;
    for (const float temperature : {0.0f, 0.8f}) {
      for (const int32_t top_k : {0, 1, 40, 2048, 3000}) {
        for (const float top_p : {1.0f, 0.9f, 0.5f}) {
          for (const float min_p : {0.0f, 0.05f}) {
            if (temperature == 0.0f && (top_p < 1.0f || min_p > 0.0f)) continue;
            Row row;
            row.logits = Logits(kind, V, rng);
            row.params = SamplingParams{temperature, top_k, top_p, min_p};
            row.draw = unit(rng);
            rows.push_back(std::move(row));
          }
        }
      }
    }
    const Outcome got = RunDevice(rows, V);
    int fast = 0, drawing = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const Row& row = rows[r];
      const SamplingParams& p = row.params;
      SCOPED_TRACE(::testing::Message() << "row " << r << " temperature " << p.temperature << " top_k " << p.top_k
                                        << " top_p " << p.top_p << " min_p " << p.min_p << " draw " << row.draw);
      const int32_t want = SampleRow(row.logits.data(), V, p, row.draw);
      EXPECT_EQ(got.ids[r], want);
      if (!SamplingDraws(p, V)) continue;
      ++drawing;
      fast += got.fast[r] ? 1 : 0;
      if (p.top_k > 0 && p.top_k <= smp::kCandidates) EXPECT_TRUE(got.fast[r]);
      if (p.top_p == 1.0f && p.min_p == 0.0f) {
        EXPECT_EQ(got.fast[r], HostRank(row.logits, want) < smp::kCandidates);
      }
    }
    if (kind == kPeaked) EXPECT_EQ(fast, drawing);
    if (kind == kFlat) EXPECT_LT(fast, drawing);
  }
}

// Rows whose token may lie past the best 2,048 candidates: nearly flat logits with the
// temperature alone (the draws spread over (0, 1): the first few land among the best 2,048, the
// others hand the row to the full sort), with top_k past the candidates, and logits in two steps
// whose min_p cut falls past the candidates but short of the vocabulary (3,000 tokens near 0 pass
// min_p 0.5, 1,000 near -1 do not), so the mass to draw from is the first 3,000's alone.
TEST(SamplingEmulated, RowsWhoseTokenMayLiePastTheCandidates) {
  std::mt19937 rng(19);
  std::normal_distribution<float> normal;
  const int64_t V = 4000;
  std::vector<Row> rows;
  for (int i = 0; i < 8; ++i) {
    for (const int32_t top_k : {0, 3000}) {
      Row row;
      row.logits = Logits(kFlat, V, rng);
      row.params = SamplingParams{1.0f, top_k, 1.0f, 0.0f};
      row.draw = (i + 0.5) / 8.0;
      rows.push_back(std::move(row));
    }
    Row step;
    step.logits.resize(static_cast<size_t>(V));
    for (int64_t k = 0; k < V; ++k) step.logits[k] = (k % 4 == 3 ? -1.0f : 0.0f) + 0.01f * normal(rng);
    step.params = SamplingParams{1.0f, 0, 1.0f, 0.5f};
    step.draw = (i + 0.5) / 8.0;
    rows.push_back(std::move(step));
  }
  const Outcome got = RunDevice(rows, V);
  int fast = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    SCOPED_TRACE(::testing::Message() << "row " << r << " top_k " << row.params.top_k << " min_p " << row.params.min_p
                                      << " draw " << row.draw);
    const int32_t want = SampleRow(row.logits.data(), V, row.params, row.draw);
    EXPECT_EQ(got.ids[r], want);
    // With min_p the walk needs the cut, which lies past the candidates: always handed on.
    EXPECT_EQ(got.fast[r], row.params.min_p == 0.0f && HostRank(row.logits, want) < smp::kCandidates);
    fast += got.fast[r] ? 1 : 0;
  }
  EXPECT_GT(fast, 0);
  EXPECT_LT(fast, static_cast<int>(rows.size()));
}

// Rows whose softmax sum is not a number (an infinite largest logit; no finite logit) take the
// host's fall-through: the first candidate with min_p, else the last kept one. A row of one
// repeated value (every candidate tied) draws by index. A vocabulary smaller than the candidates
// keeps them all.
TEST(SamplingEmulated, DegenerateRows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (const int64_t V : {int64_t{2}, int64_t{700}, int64_t{4099}}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    std::vector<Row> rows;
    for (int variant = 0; variant < 4; ++variant) {
      for (const int32_t top_k : {0, 3, 3000}) {
        for (const float min_p : {0.0f, 0.1f}) {
          if (min_p > 0.0f && (variant == 0 || variant == 3)) continue;  // a number: min_p is covered above
          Row row;
          row.logits.assign(static_cast<size_t>(V), 1.25f);
          if (variant == 1) row.logits[V / 2] = INFINITY;
          if (variant == 2) row.logits.assign(static_cast<size_t>(V), -INFINITY);
          if (variant == 3) {
            for (float& v : row.logits) v = rng() % 3 == 0 ? NAN : -INFINITY;
            row.logits[V - 1] = 2.0f;
          }
          row.params = SamplingParams{1.0f, top_k, 0.95f, min_p};
          row.draw = unit(rng);
          rows.push_back(std::move(row));
        }
      }
    }
    const Outcome got = RunDevice(rows, V);
    for (size_t r = 0; r < rows.size(); ++r) {
      SCOPED_TRACE(::testing::Message() << "row " << r << " top_k " << rows[r].params.top_k << " min_p "
                                        << rows[r].params.min_p);
      EXPECT_EQ(got.ids[r], SampleRow(rows[r].logits.data(), V, rows[r].params, rows[r].draw));
    }
  }
}

// Kimi K2's vocabulary of 163,840 with a trained model's spread: the fast path takes every row,
// with and without top_k, top_p or min_p, and samples the host's token.
TEST(SamplingEmulated, FullVocabularyPeakedRowsTakeTheFastPath) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t V = 163840;
  std::vector<Row> rows;
  for (const SamplingParams p : {SamplingParams{1.0f, 0, 1.0f, 0.0f}, SamplingParams{0.7f, 50, 0.95f, 0.0f},
                                 SamplingParams{1.0f, 0, 0.9f, 0.0f}, SamplingParams{0.9f, 0, 1.0f, 0.02f}}) {
    Row row;
    row.logits.resize(static_cast<size_t>(V));
    // A long tail and a head of a few dozen tokens well above it.
    std::normal_distribution<float> normal;
    for (float& v : row.logits) v = 2.0f * normal(rng);
    for (int i = 0; i < 40; ++i) row.logits[rng() % V] = 14.0f + 2.0f * normal(rng);
    row.params = p;
    row.draw = unit(rng);
    rows.push_back(std::move(row));
  }
  const Outcome got = RunDevice(rows, V);
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    EXPECT_EQ(got.ids[r], SampleRow(rows[r].logits.data(), V, rows[r].params, rows[r].draw));
    EXPECT_TRUE(got.fast[r]);
  }
}

}  // namespace
}  // namespace llmrt::cuda
